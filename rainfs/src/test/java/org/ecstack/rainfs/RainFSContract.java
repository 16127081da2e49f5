package org.ecstack.rainfs;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.contract.AbstractFSContract;

/** Hadoop's FileSystem contract bound to rainfs:// over three "NAS" directories at replication 2. */
public class RainFSContract extends AbstractFSContract {
  public static final String CONTRACT_XML = "contract/rainfs.xml";
  private static RainTestbed bed;
  private FileSystem fs;

  public RainFSContract(Configuration conf) {
    super(conf);
    addConfResource(CONTRACT_XML);
  }

  private static synchronized RainTestbed bed() throws IOException {
    if (bed == null) {
      bed = new RainTestbed("contract", 3, 2, 2);
    }
    return bed;
  }

  @Override
  public void init() throws IOException {
    super.init();
    getConf().set(RainFileSystem.CONFIG_KEY, bed().configFile.toString());
    fs = FileSystem.newInstance(java.net.URI.create("rainfs:///"), getConf());
  }

  @Override
  public FileSystem getTestFileSystem() throws IOException {
    return fs;
  }

  @Override
  public String getScheme() {
    return RainFileSystem.SCHEME;
  }

  @Override
  public Path getTestPath() {
    return fs.makeQualified(new Path("/test"));
  }
}
