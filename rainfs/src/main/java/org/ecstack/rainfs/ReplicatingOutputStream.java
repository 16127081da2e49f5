package org.ecstack.rainfs;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.zip.CRC32C;
import org.apache.hadoop.fs.StreamCapabilities;
import org.apache.hadoop.fs.Syncable;

/**
 * The stream create() and append() return (seed §2.6.3.1): "Writes occur simultaneously to all replicas via
 * threading, one thread per replica." Bytes gather in a buffer; a full buffer goes to every replica's writer
 * thread at once, and the next buffer fills while they write. The CRC-32C of everything written goes into the
 * metadata at close, which is how fsck later tells a corrupt replica.
 *
 * <p>If any replica cannot be written, the stream fails: that write (or the next call, or close) throws an
 * IOException naming the replica, every replica is closed, and the metadata stays {@code open}, which fsck
 * completes or rolls back after its timeout. Nothing is left that fsck cannot clean up.
 *
 * <p>A replica whose NAS hangs instead of failing (a hard-mounted NFS) fails the same way once
 * {@code nasTimeoutMillis} passes without its writer thread finishing a buffer (or a force, or the close): the
 * stream fails naming the replica, its NAS becomes suspect ({@link NasGuard}: no new file is created there
 * until it answers), and the hung thread is left behind, a daemon; the replica's channel is closed on that
 * thread once the NAS answers, never on the caller's (closing a file blocked in a hung mount blocks too).
 */
final class ReplicatingOutputStream extends OutputStream implements Syncable, StreamCapabilities {
  /** Called after a clean close with the file's length and CRC-32C. */
  interface OnClose {
    void closed(long length, long crc32c) throws IOException;
  }

  private static final int BUFFER_BYTES = 1 << 20;
  /**
   * The slowest write-back a live NAS is allowed at close and hsync, which wait for every byte the page cache
   * still holds: their deadline is nasTimeoutMillis plus the bytes written since open or the last hsync at
   * this rate (a 4 GB file gets 400 s more), so a slow NAS is not taken for a hung one.
   */
  private static final long WRITE_BACK_BYTES_PER_MILLI_MIN = 10_000; // 10 MB/s

  /** Test hook: a replica for which this returns true fails its next write, as if its NAS went away. */
  static volatile java.util.function.Predicate<Path> failWrite;

  private final List<Path> replicas;
  private final FileChannel[] channels;
  private final ExecutorService[] writers;
  private final List<Future<?>> pending = new ArrayList<>();
  /** The replica index of each pending future. */
  private final List<Integer> pendingReplica = new ArrayList<>();
  /** 0: no timeout. */
  private final long timeoutMillis;
  /** Per replica: a task is running on its writer thread / a task timed out and has not returned. */
  private final boolean[] running;
  private final boolean[] hung;
  private final Object hangLock = new Object();
  private final CRC32C crc;
  private final OnClose onClose;
  /** The experiment's emulated route per replica (null when off), fixed by the thread that opened the stream. */
  private final NasLink.Route[] routes;
  private byte[] buf = new byte[BUFFER_BYTES];
  private byte[] spare = new byte[BUFFER_BYTES];
  private int fill;
  private long length;
  /** Bytes handed to the writer threads since open or the last hsync (what a close or force writes back). */
  private long unsyncedBytes;
  private IOException failure;
  private boolean closed;

  ReplicatingOutputStream(List<Path> replicas, FileChannel[] channels, long initialLength, CRC32C crc,
      OnClose onClose, long timeoutMillis) {
    assert replicas.size() == channels.length && channels.length > 0;
    this.replicas = replicas;
    this.channels = channels;
    this.length = initialLength;
    this.crc = crc;
    this.onClose = onClose;
    this.timeoutMillis = timeoutMillis;
    this.running = new boolean[channels.length];
    this.hung = new boolean[channels.length];
    this.routes = NasLink.writeRoutes(replicas);
    this.writers = new ExecutorService[channels.length];
    for (int i = 0; i < channels.length; i++) {
      final String name = "rainfs-writer-" + i + "-" + replicas.get(i).getFileName();
      writers[i] = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
      });
    }
  }

  @Override
  public synchronized void write(int b) throws IOException {
    checkOpen();
    if (fill == buf.length) {
      dispatch();
    }
    buf[fill++] = (byte) b;
    crc.update(b);
    length++;
  }

  @Override
  public synchronized void write(byte[] b, int off, int len) throws IOException {
    checkOpen();
    if (off < 0 || len < 0 || off + len > b.length) {
      throw new IndexOutOfBoundsException("off " + off + " len " + len + " array " + b.length);
    }
    crc.update(b, off, len);
    length += len;
    while (len > 0) {
      if (fill == buf.length) {
        dispatch();
      }
      int n = Math.min(len, buf.length - fill);
      System.arraycopy(b, off, buf, fill, n);
      fill += n;
      off += n;
      len -= n;
    }
  }

  /** Hand the filled buffer to every replica's writer thread; the previous round must have finished. */
  private void dispatch() throws IOException {
    await();
    if (fill == 0) {
      return;
    }
    final byte[] data = buf;
    final int n = fill;
    unsyncedBytes += n;
    for (int i = 0; i < channels.length; i++) {
      final FileChannel ch = channels[i];
      final Path replica = replicas.get(i);
      final NasLink.Route route = routes == null ? null : routes[i];
      submit(i, () -> {
        java.util.function.Predicate<Path> fault = failWrite;
        if (fault != null && fault.test(replica)) {
          throw new IOException("injected failure: NAS of " + replica + " unavailable");
        }
        NasLink.charge(route, n);
        ByteBuffer bb = ByteBuffer.wrap(data, 0, n);
        while (bb.hasRemaining()) {
          ch.write(bb);
        }
      });
    }
    buf = spare;
    spare = data;
    fill = 0;
  }

  /** One step of a writer thread: a buffer, a force or the close of one replica. */
  private interface Step {
    void run() throws IOException;
  }

  /** Queue {@code step} on replica {@code i}'s writer thread; {@link #await} waits for it. */
  private void submit(int i, Step step) {
    final Path replica = replicas.get(i);
    pending.add(writers[i].submit(() -> {
      synchronized (hangLock) {
        running[i] = true;
      }
      try {
        NasGuard.stallPoint(Layout.nasOf(replica));
        step.run();
      } finally {
        synchronized (hangLock) {
          running[i] = false;
          if (hung[i]) { // the caller gave up on this step; its NAS answers again
            hung[i] = false;
            NasGuard.of(replica).answered();
          }
        }
      }
      return null;
    }));
    pendingReplica.add(i);
  }

  /**
   * Wait for the writer threads (up to the NAS timeout per round); the first replica failure fails the stream.
   * A replica that times out marks its NAS suspect and leaves its thread blocked.
   */
  private void await() throws IOException {
    await(timeoutMillis);
  }

  /** A close or force: the deadline grows with what the page cache may still have to write back. */
  private void awaitWriteBack() throws IOException {
    await(timeoutMillis + unsyncedBytes / WRITE_BACK_BYTES_PER_MILLI_MIN);
    unsyncedBytes = 0;
  }

  private void await(long waitMillis) throws IOException {
    IOException first = null;
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(waitMillis);
    for (int k = 0; k < pending.size(); k++) {
      int i = pendingReplica.get(k);
      try {
        if (timeoutMillis <= 0) {
          pending.get(k).get();
        } else {
          pending.get(k).get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        }
      } catch (ExecutionException e) {
        if (first == null) {
          Throwable c = e.getCause();
          first = new IOException("rainfs: replica " + replicas.get(i) + " failed: " + c, c);
        }
      } catch (TimeoutException e) {
        synchronized (hangLock) {
          if (running[i] && !hung[i]) {
            hung[i] = true;
            NasGuard.of(replicas.get(i)).timedOut("write " + replicas.get(i), waitMillis);
          }
        }
        if (first == null) {
          first = new NasGuard.NasTimeoutException("rainfs: replica " + replicas.get(i) + " failed: its NAS did not"
              + " answer within " + waitMillis + " ms (nasTimeoutMillis; a hung mount?)");
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        first = new java.io.InterruptedIOException("rainfs: interrupted waiting for replica writers");
        break;
      }
    }
    pending.clear();
    pendingReplica.clear();
    if (first != null) {
      fail(first);
    }
  }

  private void fail(IOException e) throws IOException {
    failure = e;
    closeQuietly();
    throw e;
  }

  private void checkOpen() throws IOException {
    if (failure != null) {
      throw new IOException("rainfs: this stream failed earlier: " + failure.getMessage(), failure);
    }
    if (closed) {
      throw new IOException("rainfs: stream is closed");
    }
  }

  @Override
  public synchronized void flush() throws IOException {
    if (closed && failure == null) {
      return;
    }
    checkOpen();
    dispatch();
    await();
  }

  @Override
  public synchronized void hflush() throws IOException {
    flush();
  }

  @Override
  public synchronized void hsync() throws IOException {
    flush();
    for (int i = 0; i < channels.length; i++) {
      final FileChannel ch = channels[i];
      submit(i, () -> ch.force(false));
    }
    awaitWriteBack();
  }

  @Override
  public boolean hasCapability(String capability) {
    switch (capability.toLowerCase(java.util.Locale.ENGLISH)) {
      case StreamCapabilities.HFLUSH:
      case StreamCapabilities.HSYNC:
        return true;
      default:
        return false;
    }
  }

  @Override
  public synchronized void close() throws IOException {
    if (closed) {
      if (failure != null) {
        throw new IOException("rainfs: this stream failed earlier: " + failure.getMessage(), failure);
      }
      return;
    }
    flush();
    // Close every replica on its own writer thread: closing a file on NFS writes it back, and may hang.
    for (int i = 0; i < channels.length; i++) {
      final FileChannel ch = channels[i];
      final Path replica = replicas.get(i);
      submit(i, () -> {
        try {
          ch.close();
        } catch (IOException e) {
          throw new IOException("failed at close: " + e + " (" + replica + ")", e);
        }
      });
    }
    awaitWriteBack(); // a failure closes the rest (closeQuietly) and throws
    shutdownWriters();
    closed = true;
    onClose.closed(length, crc.getValue());
  }

  /** Close every replica on its writer thread, without waiting: after any step still blocked in a hung NAS. */
  private void closeQuietly() {
    closed = true;
    for (int i = 0; i < channels.length; i++) {
      final FileChannel ch = channels[i];
      try {
        writers[i].execute(() -> {
          try {
            ch.close();
          } catch (IOException ignored) {
            // the stream has failed already; that failure is what the caller sees
          }
        });
      } catch (java.util.concurrent.RejectedExecutionException e) {
        // shut down already: its channel was closed by close()
      }
    }
    shutdownWriters();
  }

  private void shutdownWriters() {
    for (ExecutorService w : writers) {
      w.shutdown();
    }
  }
}
