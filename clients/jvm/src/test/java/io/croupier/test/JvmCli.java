package io.croupier.test;

import io.croupier.client.App;
import io.croupier.client.Batch;
import io.croupier.client.BatchReader;
import io.croupier.client.ClientOptions;
import io.croupier.client.CroupierClient;
import io.croupier.client.DataLostException;
import io.croupier.client.MapWriter;
import io.croupier.client.Shuffle;
import io.croupier.proto.CroupierException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.List;

/**
 * The JVM client driven from pytest against real servers. One command per run:
 *
 * <pre>
 * ping URL [DEADLINE]                         connect (PING, retried for DEADLINE s, default 5); prints "ok"
 * write URL HANDLE MAP ATTEMPT RECORDS [P...]  records "j-MAP-I" to partition I % P (or round robin
 *                                             over the partitions listed); prints "won=BOOL"
 * rerun URL HANDLE                            GET_LOST_MAPS, then RERUN_MAPS of them; prints "rerun M..."
 * read URL HANDLE SM EM SP EP [nosmall]       prints "record PARTITION MAP BASE64" per record
 *                                             (nosmall: OPEN_STREAM and FETCH_CHUNK only)
 * pause URL HANDLE MAP RECORDS                as write, but prints "half" halfway and waits for a line on stdin
 * beats URL                                   an app heartbeating every 100 ms, attached from a handle
 * bench URL MIB PARTITIONS BATCH_KIB          4 maps push MIB in all as opaque batches, read back and
 *                                             checked (CRC32 per batch); prints MB/s of each, and of BLAKE3
 * pace URL                                    an app at the master's pace: prints "interval=MS", outlives
 *                                             3 x its interval x 3 without a call of its own, prints "ok"
 * e2e URL                                     register, write 3 maps, read all and a map range, unregister
 * </pre>
 *
 * Errors print {@code error CODE MESSAGE} (and {@code pairs M:P ...} for DATA_LOST) and exit 3.
 */
public final class JvmCli {
  private JvmCli() {}

  public static void main(String[] args) throws Exception {
    long deadline = args[0].equals("ping") && args.length > 2 ? Long.parseLong(args[2]) : 5;
    ClientOptions o = new ClientOptions().requestTimeout(Duration.ofSeconds(10)).retries(1)
        .failoverDeadline(Duration.ofSeconds(deadline)).connectTimeout(Duration.ofSeconds(5))
        .commitWaitTimeout(Duration.ofSeconds(60)).pushBufferSize(256)
        .smallFetchBatch(args[args.length - 1].equals("nosmall") ? 0 : 128).fetchChunksInFlight(2);
    try (CroupierClient c = CroupierClient.connect(args[1], o)) {
      switch (args[0]) {
        case "ping" -> System.out.println("ok");
        case "write" -> write(c.openShuffle(args[2]), args);
        case "ends" -> ends(args[1], args[2], Integer.parseInt(args[3]), args[4].equals("batched"), o);
        case "writers" -> writers(c, c.openShuffle(args[2]), Integer.parseInt(args[3]), Integer.parseInt(args[4]));
        case "pause" -> pause(c.openShuffle(args[2]), args);
        case "read" -> read(c.openShuffle(args[2]), args);
        case "e2e" -> e2e(c);
        case "rerun" -> rerun(c.openShuffle(args[2]));
        case "beats" -> beats(args[1]);
        case "pace" -> pace(c);
        case "bench" -> Bench.run(c, Integer.parseInt(args[2]), Integer.parseInt(args[3]), Integer.parseInt(args[4]));
        default -> throw new IllegalArgumentException("unknown command " + args[0]);
      }
    } catch (DataLostException e) {
      StringBuilder pairs = new StringBuilder("pairs");
      for (int[] p : e.pairs()) {
        pairs.append(' ').append(p[0]).append(':').append(p[1]);
      }
      System.out.println("error " + e.code() + " " + e.getMessage());
      System.out.println(pairs);
      System.exit(3);
    } catch (CroupierException e) {
      System.out.println("error " + e.code() + " " + e.getMessage());
      System.exit(3);
    }
  }

  private static void write(Shuffle sh, String[] a) {
    int map = Integer.parseInt(a[3]);
    int attempt = Integer.parseInt(a[4]);
    int n = Integer.parseInt(a[5]);
    int[] parts = a.length > 6 ? Arrays.stream(a, 6, a.length).mapToInt(Integer::parseInt).toArray()
        : java.util.stream.IntStream.range(0, sh.numPartitions()).toArray();
    try (MapWriter w = sh.writer(map, attempt)) {
      for (int i = 0; i < n; i++) {
        w.write(parts[i % parts.length], ("j-" + map + "-" + i).getBytes(StandardCharsets.UTF_8));
      }
      System.out.println("won=" + w.commit());
    }
  }

  /**
   * {@code maps} map tasks of one executor at once (one thread each, one client): each writes
   * {@code n} records, then all commit together, so their MAPPER_ENDs share requests.
   */
  private static void writers(CroupierClient c, Shuffle sh, int maps, int n) throws Exception {
    java.util.concurrent.CyclicBarrier ready = new java.util.concurrent.CyclicBarrier(maps);
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(maps);
    try {
      java.util.List<java.util.concurrent.Future<Boolean>> wins = new java.util.ArrayList<>();
      for (int m = 0; m < maps; m++) {
        int map = m;
        wins.add(pool.submit(() -> {
          try (MapWriter w = sh.writer(map, 0)) {
            for (int i = 0; i < n; i++) {
              w.write(i % sh.numPartitions(), ("j-" + map + "-" + i).getBytes(StandardCharsets.UTF_8));
            }
            ready.await();
            return w.commit();
          }
        }));
      }
      int won = 0;
      for (java.util.concurrent.Future<Boolean> f : wins) {
        won += f.get() ? 1 : 0;
      }
      System.out.println("won=" + won + " requests=" + c.mapperEndRequests());
    } finally {
      pool.shutdownNow();
    }
  }

  /**
   * An executor of {@code threads} cores running short map tasks: each thread commits empty
   * writers of the shuffle's maps in turn (map m on thread m % threads), so the run is its
   * MAPPER_ENDs. Prints their count, the requests they took and the seconds.
   */
  private static void ends(String url, String handle, int threads, boolean batched, ClientOptions o) throws Exception {
    try (CroupierClient c = CroupierClient.connect(url, o.mapperEndBatching(batched))) {
      Shuffle sh = c.openShuffle(handle);
      int maps = sh.numMappers();
      java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(threads);
      long t0 = System.nanoTime();
      try {
        java.util.List<java.util.concurrent.Future<Integer>> wins = new java.util.ArrayList<>();
        for (int t = 0; t < threads; t++) {
          int first = t;
          wins.add(pool.submit(() -> {
            int won = 0;
            for (int m = first; m < maps; m += threads) {
              try (MapWriter w = sh.writer(m, 0)) {
                won += w.commit() ? 1 : 0;
              }
            }
            return won;
          }));
        }
        int won = 0;
        for (java.util.concurrent.Future<Integer> f : wins) {
          won += f.get();
        }
        double s = (System.nanoTime() - t0) / 1e9;
        System.out.printf("ends=%d won=%d requests=%d seconds=%.3f%n", maps, won, c.mapperEndRequests(), s);
      } finally {
        pool.shutdownNow();
      }
    }
  }

  private static void pause(Shuffle sh, String[] a) throws java.io.IOException {
    int map = Integer.parseInt(a[3]);
    int n = Integer.parseInt(a[4]);
    try (MapWriter w = sh.writer(map, 0)) {
      for (int i = 0; i < n; i++) {
        if (i == n / 2) {
          System.out.println("half");
          System.out.flush();
          new java.io.BufferedReader(new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        }
        w.write(i % sh.numPartitions(), ("j-" + map + "-" + i).getBytes(StandardCharsets.UTF_8));
      }
      System.out.println("won=" + w.commit() + " messages=" + w.messages());
    }
  }

  private static void read(Shuffle sh, String[] a) {
    int[] r = Arrays.stream(a, 3, 7).mapToInt(Integer::parseInt).toArray();
    try (BatchReader reader = sh.reader(r[0], r[1], r[2], r[3])) {
      while (reader.hasNext()) {
        Batch b = reader.next();
        for (byte[] rec : b.records()) {
          System.out.println("record " + b.partition() + " " + b.mapId() + " " + Base64.getEncoder().encodeToString(rec));
        }
      }
    }
  }

  private static void beats(String url) throws InterruptedException {
    ClientOptions fast = new ClientOptions().heartbeatInterval(Duration.ofMillis(100));
    try (CroupierClient c = CroupierClient.connect(url, fast); CroupierClient other = CroupierClient.connect(url, fast)) {
      App app = c.registerApp(null, "beats");
      long deadline = System.nanoTime() + 30_000_000_000L;
      while (app.heartbeats() < 3 && System.nanoTime() < deadline) {
        Thread.sleep(50);
      }
      check(app.heartbeats() >= 3, "only " + app.heartbeats() + " heartbeats");
      App attached = other.attach(app.handle());
      check(attached.id().equals(app.id()), "attached another app");
      String forged = app.handle().substring(0, app.handle().length() - 1) + (app.handle().endsWith("0") ? "1" : "0");
      try {
        other.attach(forged);
        check(false, "a forged key was accepted");
      } catch (CroupierException e) {
        check(e.code() == io.croupier.proto.ErrorCode.UNAUTHORIZED, "forged key: " + e.code());
      }
      attached.unregister();
      System.out.println("ok beats");
    }
  }

  private static void pace(CroupierClient c) throws InterruptedException {
    App app = c.registerApp(null, "pace");
    long ms = app.heartbeatInterval().toMillis();
    System.out.println("interval=" + ms);
    System.out.flush();
    if (ms < 10_000) {
      Thread.sleep(ms * 9); // three app timeouts
      c.attach(app.handle()).close(); // UNKNOWN_APP had the heartbeats been slower than the master's pace
      app.unregister();
      System.out.println("ok");
    }
  }

  private static void rerun(Shuffle sh) {
    int[] lost = sh.lostMaps().mapIds();
    boolean started = sh.rerunMaps(lost);
    StringBuilder out = new StringBuilder("rerun");
    for (int m : lost) {
      out.append(' ').append(m);
    }
    System.out.println(out + (started ? "" : " (repeat)"));
  }

  private static void e2e(CroupierClient c) {
    App app = c.registerApp(null, "jvm-e2e");
    Shuffle sh = app.registerShuffle(3, 4);
    List<String> want = new ArrayList<>();
    for (int m = 0; m < 3; m++) {
      try (MapWriter w = sh.writer(m, 0)) {
        for (int i = 0; i < 50; i++) {
          String rec = "m" + m + "-r" + i;
          w.write(i % 4, rec.getBytes(StandardCharsets.UTF_8));
          want.add(rec);
        }
        byte[] raw = ("raw-" + m).getBytes(StandardCharsets.UTF_8);
        w.pushBatch(m % 4, raw, 0, raw.length);
        w.pushBatch((m + 1) % 4, ("raw-own-" + m).getBytes(StandardCharsets.UTF_8));
        check(w.commit(), "map " + m + " did not win");
      }
    }
    List<String> got = new ArrayList<>();
    List<String> raws = new ArrayList<>();
    try (BatchReader r = sh.reader(0, Integer.MAX_VALUE, 0, 4)) {
      r.forEachRemaining(b -> {
        String text = new String(b.data(), StandardCharsets.UTF_8);
        if (text.startsWith("raw-")) {
          raws.add(text);
        } else {
          b.records().forEach(rec -> got.add(new String(rec, StandardCharsets.UTF_8)));
        }
      });
    }
    Collections.sort(want);
    Collections.sort(got);
    Collections.sort(raws);
    check(want.equals(got), "records differ: " + got.size() + " of " + want.size());
    check(raws.equals(List.of("raw-0", "raw-1", "raw-2", "raw-own-0", "raw-own-1", "raw-own-2")), "raw batches " + raws);
    List<Integer> maps = new ArrayList<>();
    try (BatchReader r = sh.reader(1, 2, 0, 4)) {
      r.forEachRemaining(b -> maps.add(b.mapId()));
    }
    check(!maps.isEmpty() && maps.stream().allMatch(m -> m == 1), "map range [1, 2) read maps " + maps);
    check(sh.lostMaps().mapIds().length == 0, "lost maps in a healthy shuffle");
    check(!sh.writer(0, 1).commit(), "a late attempt won");
    check(sh.unregister(), "unregister");
    app.unregister();
    System.out.println("ok " + got.size() + " records, " + maps.size() + " batches of map 1");
  }

  private static void check(boolean ok, String what) {
    if (!ok) {
      throw new IllegalStateException(what);
    }
  }
}
