package io.croupier.spark;

import io.croupier.client.CroupierClient;
import io.croupier.client.Shuffle;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.rpc.RpcTimeout;
import org.apache.spark.util.RpcUtils;
import scala.concurrent.duration.FiniteDuration;
import scala.reflect.ClassTag$;

/**
 * What the tasks of one JVM share: one Croupier client (its sockets and nonce), the shuffles
 * they opened, and the reference to the driver's {@link DriverEndpoint}.
 *
 * <p>Opened shuffles are cached per (Croupier shuffle, Spark stage attempt): a new stage attempt
 * (a rerun after a loss) opens the shuffle again, so its writers see the new epochs.
 */
final class ExecutorContext {
  private static final int CACHE = 64;
  private static ExecutorContext instance;

  private final SparkConf conf;
  private CroupierClient client;
  private RpcEndpointRef driver;
  private final Map<String, String> answers = lru();
  private final Map<String, Shuffle> opened = lru();

  private ExecutorContext(SparkConf conf) {
    this.conf = conf;
  }

  static synchronized ExecutorContext get(SparkConf conf) {
    if (instance == null) {
      instance = new ExecutorContext(conf);
    }
    return instance;
  }

  static synchronized void close() {
    if (instance != null && instance.client != null) {
      instance.client.close();
    }
    instance = null;
  }

  private static <V> Map<String, V> lru() {
    return new LinkedHashMap<>(16, 0.75f, true) {
      @Override
      protected boolean removeEldestEntry(Map.Entry<String, V> e) {
        return size() > CACHE;
      }
    };
  }

  /** The Croupier shuffle the map task {@code ctx} of {@code handle} writes. */
  Shuffle writerShuffle(CroupierShuffleHandle<?, ?, ?> handle, TaskContext ctx) {
    String q = "croupier writer " + handle.shuffleId() + " " + ctx.stageId() + " " + ctx.stageAttemptNumber();
    return open(handle, ask(q, true), ctx);
  }

  /** The Croupier shuffle the reduce task {@code ctx} of {@code handle} reads. */
  Shuffle readerShuffle(CroupierShuffleHandle<?, ?, ?> handle, TaskContext ctx) {
    String q = "croupier reader " + handle.shuffleId() + " " + ctx.stageId() + " " + ctx.stageAttemptNumber();
    return open(handle, ask(q, true), ctx);
  }

  /** Tells the driver that {@code croupierId} lost data; returns after it acted. */
  String reportLost(int sparkShuffleId, long croupierId) {
    return ask("croupier lost " + sparkShuffleId + " " + croupierId, false);
  }

  private synchronized Shuffle open(CroupierShuffleHandle<?, ?, ?> handle, String shuffleHandle, TaskContext ctx) {
    String key = shuffleHandle + "@" + ctx.stageId() + "/" + ctx.stageAttemptNumber();
    Shuffle sh = opened.get(key);
    if (sh == null) {
      if (client == null) {
        client = CroupierClient.connect(handle.masterUrl(), DriverContext.options(conf));
      }
      sh = client.openShuffle(shuffleHandle);
      opened.put(key, sh);
    }
    return sh;
  }

  /** Asks the driver's endpoint; {@code cached}: the same question gets the first answer. */
  private String ask(String question, boolean cached) {
    synchronized (this) {
      if (cached && answers.containsKey(question)) {
        return answers.get(question);
      }
    }
    // "reader" questions are per stage attempt in the key, but the driver answers by shuffle
    String wire = question.startsWith("croupier reader ")
        ? question.substring(0, question.indexOf(' ', "croupier reader ".length()))
        : question;
    String answer = (String) ref().askSync(wire, timeout(), ClassTag$.MODULE$.apply(String.class));
    if (cached) {
      synchronized (this) {
        answers.put(question, answer);
      }
    }
    return answer;
  }

  private synchronized RpcEndpointRef ref() {
    if (driver == null) {
      SparkEnv env = SparkEnv.get();
      driver = RpcUtils.makeDriverRef(DriverEndpoint.NAME, env.conf(), env.rpcEnv());
    }
    return driver;
  }

  private RpcTimeout timeout() {
    long seconds = conf.getTimeAsSeconds("spark.croupier.driverTimeout", "300s");
    return new RpcTimeout(new FiniteDuration(seconds, TimeUnit.SECONDS), "spark.croupier.driverTimeout");
  }
}
