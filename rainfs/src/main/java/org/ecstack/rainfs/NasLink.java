package org.ecstack.rainfs;

import java.io.InterruptedIOException;
import java.nio.file.Path;
import java.util.List;

/**
 * Experiment hook (off unless set): an emulated network link per NAS mount, so one machine can show how
 * RainFS's client-level federation uses the bandwidth of several NAS systems (seed §2.6.1 goal 1). Every
 * replica write and every read passes its byte count here; a link is a FIFO server of fixed bandwidth shared
 * by all streams of this JVM. Set by the experiment only ({@code src/terasort/java/RainfsExperiment}).
 */
public final class NasLink {
  private final List<Path> mounts;
  private final double bytesPerNano;
  private final long[] nextFree;

  static volatile NasLink active;

  public NasLink(List<Path> mounts, double megabytesPerSecond) {
    this.mounts = List.copyOf(mounts);
    this.bytesPerNano = megabytesPerSecond * 1e6 / 1e9;
    this.nextFree = new long[mounts.size()];
  }

  /** Install (or, with null, remove) the emulated links. */
  public static void install(NasLink link) {
    active = link;
  }

  /** Charge {@code bytes} moved to or from {@code file} to its NAS's link; blocks for the transfer time. */
  static void charge(Path file, long bytes) throws InterruptedIOException {
    NasLink l = active;
    if (l == null || bytes <= 0) {
      return;
    }
    l.transfer(file, bytes);
  }

  private void transfer(Path file, long bytes) throws InterruptedIOException {
    int i = 0;
    while (i < mounts.size() && !file.startsWith(mounts.get(i))) {
      i++;
    }
    if (i == mounts.size()) {
      return; // not on an emulated NAS (e.g. file://)
    }
    long done;
    synchronized (this) {
      long now = System.nanoTime();
      long start = Math.max(now, nextFree[i]);
      done = start + (long) (bytes / bytesPerNano);
      nextFree[i] = done;
    }
    long wait = done - System.nanoTime();
    if (wait > 0) {
      try {
        Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new InterruptedIOException("rainfs: interrupted on an emulated NAS link");
      }
    }
  }
}
