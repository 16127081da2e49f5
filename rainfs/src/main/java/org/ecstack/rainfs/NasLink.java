package org.ecstack.rainfs;

import java.io.InterruptedIOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * Experiment hook (off unless set): an emulated network of links, so one machine can show how RainFS's
 * client-level federation uses the bandwidth of several NAS systems (seed §2.6.1 goal 1) and how the seed's
 * other architectures (§2.3, Fig. 2.2) move the same bytes. Every replica write and every read passes its
 * byte count here with the route its architecture takes; a link is a FIFO server of fixed bandwidth shared by
 * every stream of this JVM, and a transfer finishes when the slowest link of its route has carried it (each
 * link is reserved for its own transfer time: a pipeline's throughput is its slowest link's). Set by the
 * experiment only ({@code src/terasort/java/RainfsExperiment}).
 *
 * <p>Links: each NAS has a link in and a link out (one shared link when built with the two-argument
 * constructor, the NAS-bound experiment); each client node has a link out and a link in (none when the client
 * bandwidth is 0); with {@link Arch#DN_ON_NAS} each NAS head node's DataNode is a server too. The "clients" are
 * the JVM's task threads: a thread that called {@link #actAsClient} is that client, any other thread is
 * assigned a client round-robin the first time it opens a stream. Client {@code c}'s rack holds NAS
 * {@code c mod n} (the seed's topology for DN-on-Client, §2.4.3).
 */
public final class NasLink {
  /** The architectures of seed §2.3 / Fig. 2.2 (and RainFS, §2.6): which links a byte crosses. */
  public enum Arch {
    /** RainFS: the client writes each replica straight to its NAS, and reads replica 0 from its NAS. */
    RAINFS("rainfs"),
    /** No HDFS (Fig. 2.2c): one federated NAS namespace, striped by the NAS systems; no replication. */
    NO_DN("no-dn"),
    /**
     * DN-on-Client (Fig. 2.2a): the writer's DataNode writes replica 0 to its rack's NAS; replica k goes
     * over the network to a DataNode on a client in another rack, which writes it to that rack's NAS (HDFS
     * replication pipelining). A read scheduled on a client whose DataNode does not hold the block pulls it
     * through the DataNode that does (§2.5.2).
     */
    DN_ON_CLIENT("dn-on-client"),
    /**
     * DN-on-NAS (Fig. 2.2b): a DataNode on each NAS head node; the client sends the block to replica 0's
     * head, which stores it and pipelines it to the next replica's head. Reads come through the head.
     */
    DN_ON_NAS("dn-on-nas");

    public final String label;

    Arch(String label) {
      this.label = label;
    }

    public static Arch parse(String s) {
      for (Arch a : values()) {
        if (a.label.equals(s)) {
          return a;
        }
      }
      throw new IllegalArgumentException("unknown architecture " + s + " (rainfs, no-dn, dn-on-client, dn-on-nas)");
    }
  }

  /** Link classes, for the byte counters ({@link #bytes}). */
  public static final int NAS_IN = 0;
  public static final int NAS_OUT = 1;
  public static final int CLIENT_OUT = 2;
  public static final int CLIENT_IN = 3;
  public static final int HEAD = 4;

  private static final InheritableThreadLocal<Integer> CLIENT = new InheritableThreadLocal<>();

  private final List<Path> mounts;
  private final int n;
  private final Arch arch;
  private final int clients;
  private final boolean sharedNasLink;
  private final double[] bytesPerNano; // per link; 0 = not emulated (unlimited)
  private final int[] linkClass;
  private final long[] nextFree;
  private final AtomicLongArray classBytes = new AtomicLongArray(5);
  private final Map<Long, Integer> threadClient = new ConcurrentHashMap<>();
  private final AtomicInteger nextClient = new AtomicInteger();
  private final AtomicInteger nextPeer = new AtomicInteger();
  private final double misplacedReads;
  private long readStreams;
  private long misplacedStreams;

  static volatile NasLink active;

  /** The NAS-bound experiment: one shared link of {@code megabytesPerSecond} per NAS, RainFS's routes. */
  public NasLink(List<Path> mounts, double megabytesPerSecond) {
    this(mounts, megabytesPerSecond, Arch.RAINFS, 1, 0, 0, 0, true);
  }

  /**
   * @param nasMBps each NAS's link, each way
   * @param clients client nodes
   * @param clientMBps each client's link, each way (0: not emulated)
   * @param headMBps each NAS head node's DataNode (DN-on-NAS only; 0: not emulated)
   * @param misplacedReads DN-on-Client: the fraction of read streams whose task runs on a client whose
   *     DataNode does not hold the block (the seed measured about a third, §2.5.2)
   */
  public NasLink(List<Path> mounts, double nasMBps, Arch arch, int clients, double clientMBps, double headMBps,
      double misplacedReads) {
    this(mounts, nasMBps, arch, clients, clientMBps, headMBps, misplacedReads, false);
  }

  private NasLink(List<Path> mounts, double nasMBps, Arch arch, int clients, double clientMBps, double headMBps,
      double misplacedReads, boolean sharedNasLink) {
    this.mounts = List.copyOf(mounts);
    this.n = mounts.size();
    this.arch = arch;
    this.clients = Math.max(1, clients);
    this.sharedNasLink = sharedNasLink;
    this.misplacedReads = misplacedReads;
    int links = 2 * n + 2 * this.clients + n;
    bytesPerNano = new double[links];
    linkClass = new int[links];
    nextFree = new long[links];
    for (int j = 0; j < n; j++) {
      set(nasIn(j), NAS_IN, nasMBps);
      set(n + j, NAS_OUT, sharedNasLink ? 0 : nasMBps);
      set(head(j), HEAD, arch == Arch.DN_ON_NAS ? headMBps : 0);
    }
    for (int c = 0; c < this.clients; c++) {
      set(out(c), CLIENT_OUT, clientMBps);
      set(in(c), CLIENT_IN, clientMBps);
    }
  }

  private void set(int link, int cls, double mbps) {
    linkClass[link] = cls;
    bytesPerNano[link] = mbps * 1e6 / 1e9;
  }

  private int nasIn(int j) {
    return j;
  }

  private int nasOut(int j) {
    return sharedNasLink ? j : n + j;
  }

  private int out(int c) {
    return 2 * n + c;
  }

  private int in(int c) {
    return 2 * n + clients + c;
  }

  private int head(int j) {
    return 2 * n + 2 * clients + j;
  }

  /** Install (or, with null, remove) the emulated links. */
  public static void install(NasLink link) {
    active = link;
  }

  /** The calling thread, and the threads it starts from now on, act as client {@code c}. */
  public static void actAsClient(int c) {
    CLIENT.set(c);
  }

  /** Bytes charged so far to links of class {@code cls} ({@link #NAS_IN} …): the traffic each link carried. */
  public long bytes(int cls) {
    return classBytes.get(cls);
  }

  private int client() {
    Integer c = CLIENT.get();
    if (c != null) {
      return Math.floorMod(c, clients);
    }
    return threadClient.computeIfAbsent(Thread.currentThread().getId(),
        k -> nextClient.getAndIncrement() % clients);
  }

  private int home(int client) {
    return client % n;
  }

  private int nasOf(Path file) {
    for (int i = 0; i < n; i++) {
      if (file.startsWith(mounts.get(i))) {
        return i;
      }
    }
    return -1;
  }

  /** A client other than {@code from} in a rack whose NAS holds no replica yet (any other client if none). */
  private int peer(int from, boolean[] usedNas) {
    int start = nextPeer.getAndIncrement();
    for (int t = 0; t < clients; t++) {
      int c = Math.floorMod(start + t, clients);
      if (c != from && !usedNas[home(c)]) {
        return c;
      }
    }
    return Math.floorMod(from + 1, clients);
  }

  /** A route: the links a transfer crosses, each with the share of the bytes it carries. */
  static final class Route {
    final NasLink link;
    final int[] links;
    final double[] share;

    Route(NasLink link, int[] links, double[] share) {
      this.link = link;
      this.links = links;
      this.share = share;
    }

    static Route of(NasLink link, int... links) {
      double[] s = new double[links.length];
      java.util.Arrays.fill(s, 1.0);
      return new Route(link, links, s);
    }
  }

  /** The emulated routes of writing each of {@code replicas} from the calling thread's client, or null. */
  static Route[] writeRoutes(List<Path> replicas) {
    NasLink l = active;
    return l == null ? null : l.routesForWrite(replicas);
  }

  private Route[] routesForWrite(List<Path> replicas) {
    int a = client();
    Route[] r = new Route[replicas.size()];
    boolean[] usedNas = new boolean[n];
    int prevClient = a;
    int prevNas = -1;
    for (int k = 0; k < r.length; k++) {
      int x = nasOf(replicas.get(k));
      if (x < 0) {
        r[k] = Route.of(this);
        continue;
      }
      switch (arch) {
        case RAINFS:
          r[k] = Route.of(this, out(a), nasIn(x));
          break;
        case NO_DN: {
          int[] links = new int[n + 1];
          double[] share = new double[n + 1];
          links[0] = out(a);
          share[0] = 1;
          for (int j = 0; j < n; j++) {
            links[j + 1] = nasIn(j);
            share[j + 1] = 1.0 / n;
          }
          r[k] = new Route(this, links, share);
          break;
        }
        case DN_ON_CLIENT:
          if (k == 0) {
            usedNas[home(a)] = true;
            r[k] = Route.of(this, out(a), nasIn(home(a)));
          } else {
            int b = peer(prevClient, usedNas);
            usedNas[home(b)] = true;
            r[k] = Route.of(this, out(prevClient), in(b), out(b), nasIn(home(b)));
            prevClient = b;
          }
          break;
        case DN_ON_NAS:
          r[k] = k == 0 ? Route.of(this, out(a), nasIn(x), head(x))
              : Route.of(this, nasOut(prevNas), head(prevNas), nasIn(x), head(x));
          prevNas = x;
          break;
        default:
          throw new AssertionError(arch);
      }
      prevNas = x;
    }
    return r;
  }

  /** The emulated route of a read stream of {@code replica} opened by the calling thread's client, or null. */
  static Route readRoute(Path replica) {
    NasLink l = active;
    return l == null ? null : l.routeForRead(replica);
  }

  private Route routeForRead(Path replica) {
    int a = client();
    int x = nasOf(replica);
    if (x < 0) {
      return Route.of(this);
    }
    switch (arch) {
      case RAINFS:
        return Route.of(this, nasOut(x), in(a));
      case NO_DN: {
        int[] links = new int[n + 1];
        double[] share = new double[n + 1];
        links[0] = in(a);
        share[0] = 1;
        for (int j = 0; j < n; j++) {
          links[j + 1] = nasOut(j);
          share[j + 1] = 1.0 / n;
        }
        return new Route(this, links, share);
      }
      case DN_ON_CLIENT: {
        boolean misplaced;
        synchronized (this) {
          readStreams++;
          // Exactly the given fraction of the streams so far (no randomness between runs).
          misplaced = misplacedStreams + 1 <= misplacedReads * readStreams + 1e-9;
          if (misplaced) {
            misplacedStreams++;
          }
        }
        if (misplaced && clients > 1) {
          int b = Math.floorMod(a + 1 + nextPeer.getAndIncrement() % (clients - 1), clients);
          return Route.of(this, nasOut(home(b)), in(b), out(b), in(a));
        }
        return Route.of(this, nasOut(home(a)), in(a));
      }
      case DN_ON_NAS:
        return Route.of(this, nasOut(x), head(x), in(a));
      default:
        throw new AssertionError(arch);
    }
  }

  /** Charge {@code bytes} to every link of {@code route}; blocks until the slowest has carried them. */
  static void charge(Route route, long bytes) throws InterruptedIOException {
    if (route == null || bytes <= 0 || route.link != active) {
      return; // not emulated, or the experiment removed these links
    }
    route.link.transfer(route, bytes);
  }

  private void transfer(Route route, long bytes) throws InterruptedIOException {
    long done = 0;
    synchronized (this) {
      long now = System.nanoTime();
      done = now;
      for (int i = 0; i < route.links.length; i++) {
        int k = route.links[i];
        double b = bytes * route.share[i];
        classBytes.addAndGet(linkClass[k], (long) b);
        if (bytesPerNano[k] <= 0) {
          continue;
        }
        long start = Math.max(now, nextFree[k]);
        nextFree[k] = start + (long) (b / bytesPerNano[k]);
        done = Math.max(done, nextFree[k]);
      }
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
