package org.ecstack.rainfs;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.contract.AbstractContractVectoredReadTest;
import org.apache.hadoop.fs.contract.AbstractFSContract;

public class TestRainFSContractVectoredRead extends AbstractContractVectoredReadTest {
  public TestRainFSContractVectoredRead(String bufferType) {
    super(bufferType);
  }

  @Override
  protected AbstractFSContract createContract(Configuration conf) {
    return new RainFSContract(conf);
  }
}
