package org.ecstack.rainfs;

import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Collectors;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;

/**
 * A RainFS over directories that stand in for NAS mounts: {@code root/nas0 .. nasN-1}, the namespace on
 * nas0 (the managing NAS), and the configuration file {@code root/rainfs.conf}.
 */
final class RainTestbed {
  final Path root;
  final List<Path> nas = new ArrayList<>();
  final Path namespace;
  final Path configFile;
  /** Written as {@code nasTimeoutMillis} when >= 0 (otherwise the default applies). */
  long nasTimeoutMillis = -1;

  RainTestbed(String name, int nasCount, int replication, int bucketPower) throws IOException {
    root = Paths.get("target", "rainfs-test", name + "-" + ProcessHandle.current().pid() + "-"
        + Long.toHexString(System.nanoTime())).toAbsolutePath();
    for (int i = 0; i < nasCount; i++) {
      Path p = root.resolve("nas" + i);
      Files.createDirectories(p);
      nas.add(p);
    }
    namespace = nas.get(0).resolve("namespace");
    configFile = root.resolve("rainfs.conf");
    writeConfig(nas, replication, bucketPower, 0);
  }

  void writeConfig(List<Path> mounts, int replication, int bucketPower, long checkerTimeoutSeconds)
      throws IOException {
    String text = "namespace = " + namespace + "\n"
        + "nas = " + mounts.stream().map(Path::toString).collect(Collectors.joining(", ")) + "\n"
        + "replication = " + replication + "\n"
        + "bucketPower = " + bucketPower + "\n"
        + "checkerTimeoutSeconds = " + checkerTimeoutSeconds + "\n"
        + (nasTimeoutMillis >= 0 ? "nasTimeoutMillis = " + nasTimeoutMillis + "\n" : "");
    Files.write(configFile, text.getBytes(StandardCharsets.UTF_8));
  }

  /** Remove this testbed's directories (long-mode suites call it after they pass: they write 100s of MB). */
  void delete() throws IOException {
    try (java.util.stream.Stream<Path> s = Files.walk(root)) {
      for (Path p : s.sorted(java.util.Comparator.reverseOrder()).toList()) {
        Files.deleteIfExists(p);
      }
    }
  }

  Configuration conf() {
    Configuration c = new Configuration();
    c.set(RainFileSystem.CONFIG_KEY, configFile.toString());
    return c;
  }

  FileSystem fs() throws IOException {
    return FileSystem.newInstance(URI.create("rainfs:///"), conf());
  }

  RainFileSystem rain() throws IOException {
    return (RainFileSystem) fs();
  }
}
