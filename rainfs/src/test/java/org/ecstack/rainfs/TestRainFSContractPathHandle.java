package org.ecstack.rainfs;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.contract.AbstractContractPathHandleTest;
import org.apache.hadoop.fs.contract.AbstractFSContract;

public class TestRainFSContractPathHandle extends AbstractContractPathHandleTest {
  public TestRainFSContractPathHandle(String testname, Options.HandleOpt[] opts, boolean serialized) {
    super(testname, opts, serialized);
  }

  @Override
  protected AbstractFSContract createContract(Configuration conf) {
    return new RainFSContract(conf);
  }
}
