package io.croupier.spark;

import org.apache.spark.rpc.RpcCallContext;
import org.apache.spark.rpc.RpcEnv;
import org.apache.spark.rpc.ThreadSafeRpcEndpoint;
import scala.Function1;
import scala.PartialFunction;
import scala.runtime.AbstractPartialFunction;
import scala.runtime.BoxedUnit;

/**
 * The driver's endpoint on Spark's own RpcEnv (name {@value #NAME}), which tasks ask with {@code
 * askSync} before they act:
 *
 * <ul>
 *   <li>{@code croupier writer <shuffle> <stage> <attempt>}: the Croupier shuffle this map stage
 *       attempt writes (a new one for a full rerun of an indeterminate stage);
 *   <li>{@code croupier reader <shuffle>}: the one reducers read;
 *   <li>{@code croupier lost <shuffle> <croupier shuffle>}: a reducer got {@code DATA_LOST}; the
 *       reply comes after the lost maps were reopened and their outputs unregistered, so the
 *       reducer's {@code FetchFailedException}, which follows, makes Spark rerun exactly them.
 * </ul>
 *
 * <p>Why an endpoint: Spark drops only the map outputs its {@code FetchFailed} handler is told
 * about (one map index, or every output of a block manager). Only code in the driver can
 * unregister an arbitrary set of maps, and it must be done before the {@code FetchFailed}
 * reaches the DAGScheduler; a synchronous ask from the failing task orders the two. Listeners
 * are asynchronous, so they could not. Messages and replies are plain strings, so neither side
 * needs this jar on the RpcEnv's class loader (executors create it before user jars load).
 */
final class DriverEndpoint implements ThreadSafeRpcEndpoint {
  static final String NAME = "croupier-shuffle-manager";

  private final RpcEnv env;
  private final DriverContext driver;

  DriverEndpoint(RpcEnv env, DriverContext driver) {
    this.env = env;
    this.driver = driver;
  }

  @Override
  public RpcEnv rpcEnv() {
    return env;
  }

  @Override
  public PartialFunction<Object, BoxedUnit> receiveAndReply(RpcCallContext context) {
    return new AbstractPartialFunction<Object, BoxedUnit>() {
      @Override
      public boolean isDefinedAt(Object msg) {
        return msg instanceof String s && s.startsWith("croupier ");
      }

      @Override
      public <A1, B1> B1 applyOrElse(A1 msg, Function1<A1, B1> fallback) {
        if (!isDefinedAt(msg)) {
          return fallback.apply(msg);
        }
        try {
          context.reply(handle((String) msg));
        } catch (RuntimeException e) {
          context.sendFailure(e);
        }
        @SuppressWarnings("unchecked")
        B1 unit = (B1) BoxedUnit.UNIT;
        return unit;
      }
    };
  }

  private String handle(String msg) {
    String[] f = msg.split(" ");
    switch (f[1]) {
      case "writer":
        return driver.writerShuffle(Integer.parseInt(f[2]), Integer.parseInt(f[3]), Integer.parseInt(f[4]));
      case "reader":
        return driver.readerShuffle(Integer.parseInt(f[2]));
      case "lost":
        return driver.dataLost(Integer.parseInt(f[2]), Long.parseLong(f[3]));
      default:
        throw new IllegalArgumentException("unknown Croupier request: " + msg);
    }
  }
}
