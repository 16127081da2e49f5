package org.ecstack.rainfs;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.file.Path;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * Calls into a NAS mount that may hang instead of failing. A hard-mounted NFS whose server stops answering
 * blocks {@code open}, {@code read}, {@code stat} and {@code write} in the kernel, where no Java interrupt
 * reaches them. The failover of §2.6.4 only works on errors, so a hung replica 0 would hang the reader.
 *
 * <p>A guarded call runs on one of this NAS's threads (at most {@link #THREADS_PER_NAS_MAX}) while the caller
 * waits up to {@code nasTimeoutMillis} (the configuration key; 0 runs calls directly, with no timeout). Past
 * the timeout the caller gets a {@link NasTimeoutException} and moves on (reads fail over to the next
 * replica). The call is abandoned: its thread stays blocked in the kernel until the NAS answers, and then
 * cleans up what the call made (closes the channel it opened, for one).
 *
 * <p>Lifecycle of a mount: <em>healthy</em> → (a call times out) → <em>suspect</em> → (an abandoned call
 * returns: the NAS answered) → healthy. While a mount is suspect, every guarded call on it fails at once with
 * a {@link SuspectNasException} and starts no thread, so a hung mount holds at most the calls that were in
 * flight when it hung: at most {@link #THREADS_PER_NAS_MAX} threads per mount, whatever the number of reads.
 * Writes run on their streams' own writer threads (one per replica, {@link ReplicatingOutputStream}); a
 * timed-out write marks the mount suspect the same way ({@link #timedOut}), so no new file is created on it.
 *
 * <p>Logs go to {@link System.Logger} ({@code org.ecstack.rainfs}), not to Hadoop's logging: fsck uses this
 * class too, and runs with no Hadoop jar.
 */
final class NasGuard {
  static final System.Logger LOG = System.getLogger("org.ecstack.rainfs");

  /** Threads per NAS mount running guarded calls: the most that one hung mount can hold. */
  static final int THREADS_PER_NAS_MAX = 8;
  /** Calls waiting for a thread of one mount; beyond this a call fails (the mount is overloaded or hung). */
  private static final int QUEUE_CALLS_MAX = 1024;

  private static final ConcurrentHashMap<Path, NasGuard> GUARDS = new ConcurrentHashMap<>();

  /** JVM-wide counts, for logs and tests: calls that timed out, calls refused because their NAS was suspect. */
  static final AtomicLong TIMEOUTS = new AtomicLong();
  static final AtomicLong SUSPECT_SKIPS = new AtomicLong();

  /** Test hook: called with the NAS mount before every guarded call and replica write, on its I/O thread. */
  static volatile Consumer<Path> stall;

  /** A NAS call that may block in the kernel. */
  interface Op<T> {
    T run() throws IOException;
  }

  /** Undoes what an abandoned call made, once it returns: {@code result} is null when the call threw. */
  interface Cleanup<T> {
    void abandoned(T result) throws IOException;
  }

  /** A call that did not return within the timeout; its NAS is now suspect. */
  static final class NasTimeoutException extends IOException {
    NasTimeoutException(String msg) {
      super(msg);
    }
  }

  /** A call refused at once because its NAS has a call that timed out and has not returned yet. */
  static final class SuspectNasException extends IOException {
    SuspectNasException(String msg) {
      super(msg);
    }
  }

  final Path nas;
  private final ThreadPoolExecutor pool;
  /** Why the mount is suspect (the first timed-out call), or null while it is healthy. */
  private volatile String suspect;
  /** Abandoned calls still blocked on this mount. */
  private final AtomicInteger hung = new AtomicInteger();

  private NasGuard(Path nas) {
    this.nas = nas;
    AtomicInteger n = new AtomicInteger();
    String name = "rainfs-nas-" + nas;
    pool = new ThreadPoolExecutor(THREADS_PER_NAS_MAX, THREADS_PER_NAS_MAX, 30, TimeUnit.SECONDS,
        new LinkedBlockingQueue<>(QUEUE_CALLS_MAX), r -> {
          Thread t = new Thread(r, name + "-" + n.incrementAndGet());
          t.setDaemon(true); // a thread blocked in a hung mount must never keep the JVM alive
          return t;
        });
    pool.allowCoreThreadTimeOut(true);
  }

  /** The guard of the NAS mount holding {@code file} (see {@link Layout#nasOf}). */
  static NasGuard of(Path file) {
    return GUARDS.computeIfAbsent(Layout.nasOf(file), NasGuard::new);
  }

  /** The guard of the NAS mounted at {@code nas} (a mount point from the configuration). */
  static NasGuard ofMount(Path nas) {
    return GUARDS.computeIfAbsent(nas, NasGuard::new);
  }

  boolean isSuspect() {
    return suspect != null;
  }

  /** Abandoned calls still blocked on this mount (threads a hang holds). */
  int hungCalls() {
    return hung.get();
  }

  /** Threads this mount's pool holds now (idle ones time out after 30 s). */
  int threads() {
    return pool.getPoolSize();
  }

  /**
   * Run {@code op} on this NAS's threads and wait up to {@code timeoutMillis} for it (directly, with no
   * timeout, when {@code timeoutMillis <= 0}). {@code cleanup} (may be null) runs when an abandoned call
   * returns. Throws {@link SuspectNasException} at once while the mount is suspect.
   */
  <T> T call(String what, long timeoutMillis, Op<T> op, Cleanup<T> cleanup) throws IOException {
    if (timeoutMillis <= 0) {
      stallPoint(nas);
      return op.run();
    }
    String why = suspect;
    if (why != null) {
      SUSPECT_SKIPS.incrementAndGet();
      throw new SuspectNasException("rainfs: NAS " + nas + " is suspect (" + why + "); skipped " + what);
    }
    Call<T> c = new Call<>(op, cleanup);
    try {
      pool.execute(c);
    } catch (RejectedExecutionException e) {
      throw new NasTimeoutException("rainfs: NAS " + nas + " has " + QUEUE_CALLS_MAX + " calls waiting; refused "
          + what);
    }
    return c.await(what, timeoutMillis);
  }

  /** A call with no result to clean up. */
  <T> T call(String what, long timeoutMillis, Op<T> op) throws IOException {
    return call(what, timeoutMillis, op, null);
  }

  static void stallPoint(Path p) {
    Consumer<Path> s = stall;
    if (s != null) {
      s.accept(p);
    }
  }

  /**
   * Close {@code c}, which no call is using any more, without waiting: on this NAS's threads when calls are
   * guarded (closing a file on a hung NFS mount can block too), directly when they are not.
   */
  void release(java.io.Closeable c, long timeoutMillis) {
    if (c == null) {
      return;
    }
    Runnable close = () -> {
      try {
        c.close();
      } catch (IOException e) {
        LOG.log(System.Logger.Level.DEBUG, "rainfs: closing a file on NAS " + nas + " failed", e);
      }
      if (timeoutMillis > 0) {
        answeredAgain(); // a close that had blocked behind a hang returned too
      }
    };
    if (timeoutMillis <= 0) {
      close.run();
      return;
    }
    try {
      pool.execute(close);
    } catch (RejectedExecutionException e) {
      LOG.log(System.Logger.Level.WARNING, "rainfs: NAS " + nas + " has too many calls waiting; a file stays open");
    }
  }

  /** A call on this mount took longer than the timeout: mark it suspect (a write thread reports this too). */
  void timedOut(String what, long timeoutMillis) {
    hung.incrementAndGet();
    markSuspect(what, timeoutMillis);
  }

  /** A call timed out (running, or queued behind this NAS's threads, all blocked): the NAS is suspect. */
  private void markSuspect(String what, long timeoutMillis) {
    TIMEOUTS.incrementAndGet();
    String why = what + " timed out after " + timeoutMillis + " ms";
    synchronized (this) {
      if (suspect == null) {
        suspect = why;
        LOG.log(System.Logger.Level.WARNING, "rainfs: NAS " + nas + " is not answering: " + why
            + "; calls on it fail over or fail until it answers");
      }
    }
  }

  /** An abandoned call returned: the NAS answers again. */
  void answered() {
    hung.decrementAndGet();
    answeredAgain();
  }

  /** A call on this NAS returned: it answers, so it is no longer suspect. */
  private void answeredAgain() {
    synchronized (this) {
      if (suspect != null) {
        LOG.log(System.Logger.Level.INFO, "rainfs: NAS " + nas + " answers again (was: " + suspect + ")");
        suspect = null;
      }
    }
  }

  private final class Call<T> implements Runnable {
    private static final int WAITING = 0;
    private static final int RUNNING = 1;
    private static final int DONE = 2;
    private static final int ABANDONED = 3;

    private final Op<T> op;
    private final Cleanup<T> cleanup;
    private int state = WAITING; // guarded by this
    private T result;
    private Throwable error;

    Call(Op<T> op, Cleanup<T> cleanup) {
      this.op = op;
      this.cleanup = cleanup;
    }

    @Override
    public void run() {
      synchronized (this) {
        if (state == ABANDONED) {
          return; // timed out while queued: never started, nothing to undo
        }
        state = RUNNING;
      }
      T r = null;
      Throwable e = null;
      try {
        stallPoint(nas);
        r = op.run();
      } catch (Throwable t) {
        e = t;
      }
      boolean abandoned;
      synchronized (this) {
        abandoned = state == ABANDONED;
        if (!abandoned) {
          result = r;
          error = e;
          state = DONE;
          notifyAll();
        }
      }
      if (!abandoned && suspect != null) {
        answeredAgain(); // submitted before the NAS turned suspect, and it returned: the NAS answers
      }
      if (abandoned) {
        answered();
        if (cleanup != null) {
          try {
            cleanup.abandoned(r);
          } catch (IOException | RuntimeException x) {
            LOG.log(System.Logger.Level.DEBUG, "rainfs: cleanup after an abandoned call on " + nas + " failed", x);
          }
        }
      }
    }

    synchronized T await(String what, long timeoutMillis) throws IOException {
      long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMillis);
      try {
        while (state == WAITING || state == RUNNING) {
          long left = deadline - System.nanoTime();
          if (left <= 0) {
            boolean started = state == RUNNING;
            state = ABANDONED;
            if (started) {
              timedOut(what, timeoutMillis);
            } else {
              markSuspect(what + " (queued: every thread of this NAS is blocked)", timeoutMillis);
            }
            throw new NasTimeoutException("rainfs: NAS " + nas + ": " + what + " timed out after " + timeoutMillis
                + " ms (a hung mount?)");
          }
          TimeUnit.NANOSECONDS.timedWait(this, left);
        }
      } catch (InterruptedException ie) {
        if (state == RUNNING) {
          hung.incrementAndGet(); // answered() balances it when the call returns
        }
        if (state == WAITING || state == RUNNING) {
          state = ABANDONED;
        }
        Thread.currentThread().interrupt();
        throw new InterruptedIOException("rainfs: interrupted waiting for NAS " + nas + ": " + what);
      }
      if (error instanceof IOException io) {
        throw io;
      }
      if (error instanceof RuntimeException re) {
        throw re;
      }
      if (error instanceof Error err) {
        throw err;
      }
      return result;
    }
  }
}
