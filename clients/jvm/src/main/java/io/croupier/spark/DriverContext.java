package io.croupier.spark;

import io.croupier.client.App;
import io.croupier.client.ClientOptions;
import io.croupier.client.CroupierClient;
import io.croupier.client.LostMaps;
import io.croupier.client.Shuffle;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.MapOutputTrackerMaster;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.rpc.RpcEnv;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The driver side of a Spark application on Croupier: its app (registered at the first shuffle,
 * heartbeating at the master's pace, unregistered at {@link #stop()}), its shuffles and their
 * generations, and the recovery decisions the {@link DriverEndpoint} serves to tasks.
 *
 * <p>All state changes are {@code synchronized}: the endpoint handles one request at a time
 * anyway, and Spark registers shuffles from its own threads.
 */
final class DriverContext {
  private static final Logger LOG = LoggerFactory.getLogger(DriverContext.class);
  /** Croupier ids of generations after the first: far above any Spark shuffle id. */
  private static final int FIRST_EXTRA_ID = 1 << 30;
  /** How long a DATA_LOST report waits for the master to see the loss (its worker timeout). */
  private static final long LOSS_WAIT_MS = 60_000;

  private final SparkConf conf;
  private final String masterUrl;
  private final Map<Integer, State> shuffles = new HashMap<>();
  private CroupierClient client;
  private App app;
  private RpcEndpointRef endpoint;
  private int nextExtraId = FIRST_EXTRA_ID;
  private boolean stopped;

  /** One Spark shuffle: its dependency, handle, and Croupier shuffles (generations), oldest first. */
  private static final class State {
    final ShuffleDependency<?, ?, ?> dep;
    final CroupierShuffleHandle<?, ?, ?> handle;
    final List<Shuffle> generations = new ArrayList<>();
    /** "stageId/stageAttempt" of each map stage attempt that asked -> its generation's index. */
    final Map<String, Integer> attempts = new HashMap<>();

    State(ShuffleDependency<?, ?, ?> dep, CroupierShuffleHandle<?, ?, ?> handle) {
      this.dep = dep;
      this.handle = handle;
    }

    Shuffle current() {
      return generations.isEmpty() ? null : generations.get(generations.size() - 1);
    }
  }

  DriverContext(SparkConf conf) {
    this.conf = conf;
    this.masterUrl = conf.get(CroupierShuffleManager.MASTER_KEY, "");
  }

  synchronized <K, V, C> CroupierShuffleHandle<K, V, C> register(
      int shuffleId, ShuffleDependency<K, V, C> dep) {
    App a = app();
    int numMappers = dep.rdd().getNumPartitions();
    int numPartitions = dep.partitioner().numPartitions();
    Shuffle sh = numMappers == 0 ? null : a.registerShuffle((long) shuffleId, numMappers, numPartitions);
    CroupierShuffleHandle<K, V, C> handle = new CroupierShuffleHandle<>(
        shuffleId, dep, masterUrl, a.handle(), sh == null ? null : sh.handle(), numMappers, numPartitions);
    State st = new State(dep, handle);
    if (sh != null) {
      st.generations.add(sh);
    }
    shuffles.put(shuffleId, st);
    LOG.info("Croupier: Spark shuffle {} registered as {} ({} maps x {} partitions)",
        shuffleId, sh == null ? "nothing (no map)" : "shuffle " + sh.id(), numMappers, numPartitions);
    return handle;
  }

  synchronized void unregister(int shuffleId) {
    State st = shuffles.remove(shuffleId);
    if (st == null) {
      return;
    }
    for (Shuffle sh : st.generations) {
      try {
        sh.unregister();
      } catch (RuntimeException e) {
        LOG.warn("Croupier: unregistering shuffle {} failed: {}", sh.id(), e.toString());
      }
    }
  }

  /** The app, registered on first use: {@code spark-<appId>-<attempt>-<random>}. */
  private App app() {
    if (stopped) {
      throw new IllegalStateException("the Croupier shuffle manager is stopped");
    }
    if (app == null) {
      if (masterUrl.isEmpty()) {
        throw new IllegalStateException(
            "set " + CroupierShuffleManager.MASTER_KEY + " to the Croupier master's URL (croupier spark conf)");
      }
      client = CroupierClient.connect(masterUrl, options(conf));
      String sparkId = conf.get("spark.app.id", "app");
      String attempt = conf.get("spark.app.attempt.id", "0");
      byte[] rnd = new byte[4];
      new SecureRandom().nextBytes(rnd);
      String id = clean("spark-" + clean(sparkId, 90) + "-" + clean(attempt, 16) + "-" + hex(rnd), 128);
      app = client.registerApp(id, clean(conf.get("spark.app.name", "spark"), 96));
      RpcEnv env = SparkEnv.get().rpcEnv();
      endpoint = env.setupEndpoint(DriverEndpoint.NAME, new DriverEndpoint(env, this));
      LOG.info("Croupier: app {} registered with {}", app.id(), masterUrl);
    }
    return app;
  }

  static ClientOptions options(SparkConf conf) {
    // a reader waiting for a commit while maps are rerun belongs to a failed stage attempt: it
    // fails at once and frees its slot for the rerun (it waited 300 s, holding the slot)
    ClientOptions o = new ClientOptions().failWhileRerunning(true)
        .mapperEndBatching(conf.getBoolean(CroupierShuffleManager.END_BATCHING_KEY, true));
    String token = conf.get(CroupierShuffleManager.TENANT_TOKEN_KEY, "");
    if (!token.isEmpty()) {
      o.tenantToken(token);
    }
    return o;
  }

  /** The generation a map stage attempt writes; a full rerun of an indeterminate stage gets a new one. */
  synchronized String writerShuffle(int shuffleId, int stageId, int stageAttempt) {
    State st = shuffles.get(shuffleId);
    if (st == null || st.current() == null) {
      throw new IllegalStateException("Croupier: Spark shuffle " + shuffleId + " is not registered");
    }
    String key = stageId + "/" + stageAttempt;
    Integer gen = st.attempts.get(key);
    if (gen == null) {
      int cur = st.generations.size() - 1;
      if (st.attempts.containsValue(cur) && indeterminate(st) && tracker().getNumAvailableOutputs(shuffleId) == 0) {
        Shuffle next = app().registerShuffle((long) nextExtraId++, st.handle.numMappers(), st.handle.numPartitions());
        st.generations.add(next);
        st.handle.shuffleHandle(next.handle());
        cur++;
        LOG.warn("Croupier: stage {} attempt {} reruns every map of indeterminate Spark shuffle {}:"
            + " it writes a new Croupier shuffle {}", stageId, stageAttempt, shuffleId, next.id());
      }
      gen = cur;
      st.attempts.put(key, gen);
    }
    return st.generations.get(gen).handle();
  }

  /** The generation reducers read: the newest. */
  synchronized String readerShuffle(int shuffleId) {
    State st = shuffles.get(shuffleId);
    if (st == null || st.current() == null) {
      throw new IllegalStateException("Croupier: Spark shuffle " + shuffleId + " is not registered");
    }
    return st.current().handle();
  }

  /**
   * A reducer of {@code croupierId} got DATA_LOST. Determinate map stage: reopen exactly the lost
   * maps ({@code GET_LOST_MAPS}, {@code RERUN_MAPS}) and unregister exactly their outputs, so that
   * Spark reruns only them. Indeterminate: unregister every output (Spark reruns the whole stage,
   * which then writes a new generation). Returns what was done, for the reducer's log.
   */
  synchronized String dataLost(int shuffleId, long croupierId) {
    State st = shuffles.get(shuffleId);
    if (st == null || st.current() == null) {
      return "shuffle " + shuffleId + " is not registered";
    }
    Shuffle cur = st.current();
    if (cur.id() != croupierId) {
      return "Croupier shuffle " + croupierId + " is an old generation of " + cur.id() + ": nothing to do";
    }
    MapOutputTrackerMaster tracker = tracker();
    if (indeterminate(st)) {
      tracker.unregisterAllMapAndMergeOutput(shuffleId);
      return "indeterminate map stage: every map output unregistered, the stage reruns into a new shuffle";
    }
    LostMaps lost = awaitLoss(cur);
    int[] maps;
    String what;
    if (!lost.committed()) {
      maps = expand(lost.rerunning());
      what = "a rerun is under way for";
    } else {
      maps = lost.mapIds();
      if (maps.length == 0) {
        return "the master knows of no lost map: the reducer retries";
      }
      cur.rerunMaps(maps);
      what = "reopened";
    }
    for (int m : maps) {
      tracker.unregisterMapOutput(shuffleId, m, SparkCompat.LOCATION);
    }
    String msg = what + " " + maps.length + " lost maps " + ranges(maps) + " of Croupier shuffle " + cur.id();
    LOG.warn("Croupier: Spark shuffle {}: {}", shuffleId, msg);
    return msg;
  }

  /**
   * The master's view of the loss a reducer just met. The reducer sees dead workers at once, the
   * master only after its worker timeout: until then {@code GET_LOST_MAPS} names nothing, and a
   * FetchFailed then would rerun the reducers alone. So wait (up to {@value #LOSS_WAIT_MS} ms)
   * for the master to name the lost maps, or for a rerun to be under way.
   */
  private static LostMaps awaitLoss(Shuffle cur) {
    long deadline = System.currentTimeMillis() + LOSS_WAIT_MS;
    LostMaps lost = cur.lostMaps();
    while (lost.committed() && lost.mapIds().length == 0 && System.currentTimeMillis() < deadline) {
      try {
        Thread.sleep(500);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
      lost = cur.lostMaps();
    }
    return lost;
  }

  private static boolean indeterminate(State st) {
    return "INDETERMINATE".equals(st.dep.rdd().outputDeterministicLevel().toString());
  }

  private static MapOutputTrackerMaster tracker() {
    return (MapOutputTrackerMaster) SparkEnv.get().mapOutputTracker();
  }

  private static int[] expand(List<int[]> ranges) {
    List<Integer> out = new ArrayList<>();
    for (int[] r : ranges) {
      for (int m = r[0]; m < r[1]; m++) {
        out.add(m);
      }
    }
    return out.stream().mapToInt(Integer::intValue).toArray();
  }

  static String ranges(int[] maps) {
    int[] s = maps.clone();
    Arrays.sort(s);
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < s.length; ) {
      int j = i;
      while (j + 1 < s.length && s[j + 1] == s[j] + 1) {
        j++;
      }
      b.append(b.length() > 1 ? ", " : "").append(s[i]).append(j > i ? "-" + s[j] : "");
      i = j + 1;
    }
    return b.append("]").toString();
  }

  synchronized void stop() {
    if (stopped) {
      return;
    }
    stopped = true;
    if (endpoint != null) {
      try {
        SparkEnv env = SparkEnv.get();
        if (env != null) {
          env.rpcEnv().stop(endpoint);
        }
      } catch (RuntimeException e) {
        LOG.debug("Croupier: stopping the endpoint: {}", e.toString());
      }
    }
    if (app != null) {
      try {
        app.unregister();
      } catch (RuntimeException e) {
        LOG.warn("Croupier: unregistering app {} failed: {}", app.id(), e.toString());
      }
    }
    if (client != null) {
      client.close();
    }
  }

  static String clean(String s, int max) {
    String c = s.replaceAll("[^A-Za-z0-9._-]", "-");
    return c.length() > max ? c.substring(0, max) : c;
  }

  private static String hex(byte[] b) {
    StringBuilder s = new StringBuilder();
    for (byte x : b) {
      s.append(String.format("%02x", x));
    }
    return s.toString();
  }
}
