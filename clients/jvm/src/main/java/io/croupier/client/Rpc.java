package io.croupier.client;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.Frames;
import io.croupier.proto.Json;
import io.croupier.proto.Reply;
import io.croupier.zmtp.DealerSocket;
import io.croupier.zmtp.ZmtpException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Logger;

/**
 * Requests and replies over one DEALER socket per server URL, matched by request id (PROTOCOL
 * §1, §2): many requests in flight per socket, replies in any order. Request ids start at a
 * random value in each process and count up, never 0. A request whose connection breaks fails
 * at once with {@code UNAVAILABLE}; one with no reply in time fails with {@code TIMEOUT}.
 * Thread-safe.
 */
final class Rpc implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(Rpc.class.getName());
  /** Frame limit of the master's port and a worker's control and fetch ports. */
  static final long SMALL_PORT = 1L << 20;
  /** Frame limit of a worker's push port. */
  static final long PUSH_PORT = 256L << 20;

  private record Pending(CompletableFuture<Reply> future, String url, long generation) {}

  private final Duration connectTimeout;
  private final Map<String, DealerSocket> sockets = new ConcurrentHashMap<>();
  private final Map<Long, Pending> pending = new ConcurrentHashMap<>();
  private final AtomicLong ids = new AtomicLong((new SecureRandom().nextLong() >>> 2) | 1);
  private volatile boolean closed;

  Rpc(Duration connectTimeout) {
    this.connectTimeout = connectTimeout;
  }

  /**
   * Sends one request; the future completes with its reply (an error reply too), or fails with
   * a {@link CroupierException} ({@code TIMEOUT}, {@code UNAVAILABLE}, or {@link
   * IncompatibleServerException}).
   *
   * @param key the app key to sign with, or null
   */
  CompletableFuture<Reply> send(String url, long maxFrame, int msgType, ObjectNode body,
      List<ByteBuffer> payloads, byte[] key, Duration timeout) {
    CompletableFuture<Reply> future = new CompletableFuture<>();
    if (closed) {
      future.completeExceptionally(new CroupierException(ErrorCode.UNAVAILABLE, "the client is closed"));
      return future;
    }
    long id = nextId();
    DealerSocket socket = sockets.computeIfAbsent(url, u -> new DealerSocket(u, maxFrame, connectTimeout, new Listener(u)));
    List<ByteBuffer> frames = Frames.request(msgType, id, Json.encode(body), payloads, key);
    Pending p = new Pending(future, url, -1);
    pending.put(id, p);
    try {
      long gen = socket.send(frames);
      pending.computeIfPresent(id, (k, v) -> new Pending(future, url, gen));
    } catch (ZmtpException e) {
      pending.remove(id);
      future.completeExceptionally(e.permanent()
          ? new IncompatibleServerException(e.getMessage(), e)
          : new CroupierException(ErrorCode.UNAVAILABLE, e.getMessage(), e));
      return future;
    }
    long ms = Math.max(1, timeout.toMillis());
    future.orTimeout(ms, TimeUnit.MILLISECONDS).whenComplete((r, e) -> pending.remove(id));
    return future;
  }

  /**
   * Sends one request and waits for an OK reply.
   *
   * @throws CroupierException the error reply, {@code TIMEOUT} or {@code UNAVAILABLE}
   */
  Reply call(String url, long maxFrame, int msgType, ObjectNode body, byte[] key, Duration timeout) {
    Reply reply = await(send(url, maxFrame, msgType, body, List.of(), key, timeout), url, timeout);
    if (!reply.ok()) {
      throw Errors.of(reply);
    }
    return reply;
  }

  /** The reply of {@code future}, or its failure as a {@link CroupierException}. */
  static Reply await(CompletableFuture<Reply> future, String url, Duration timeout) {
    try {
      return future.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new CroupierException(ErrorCode.UNAVAILABLE, "interrupted waiting for " + url, e);
    } catch (ExecutionException e) {
      throw unwrap(e.getCause(), url, timeout);
    }
  }

  /** A failure of a request's future as a {@link CroupierException}. */
  static CroupierException unwrap(Throwable cause, String url, Duration timeout) {
    if (cause instanceof CroupierException c) {
      return c;
    }
    if (cause instanceof TimeoutException) {
      return new CroupierException(ErrorCode.TIMEOUT, "no reply from " + url + " within " + timeout.toMillis() + " ms");
    }
    return new CroupierException(ErrorCode.INTERNAL, "request to " + url + " failed: " + cause, cause);
  }

  private long nextId() {
    long id;
    do {
      id = ids.getAndIncrement();
    } while (id == 0);
    return id;
  }

  /** Drops the connection to {@code url}, so the next request opens a new one. */
  void reconnect(String url) {
    DealerSocket s = sockets.get(url);
    if (s != null) {
      s.reconnect();
    }
  }

  @Override
  public void close() {
    closed = true;
    for (DealerSocket s : sockets.values()) {
      s.close();
    }
    sockets.clear();
  }

  private final class Listener implements DealerSocket.Listener {
    private final String url;

    Listener(String url) {
      this.url = url;
    }

    @Override
    public void onMessage(List<byte[]> frames) {
      Reply reply;
      try {
        reply = Reply.decode(frames);
      } catch (CroupierException e) {
        LOG.warning("croupier: a malformed reply from " + url + ": " + e.getMessage());
        return;
      }
      Pending p = pending.remove(reply.header().requestId());
      if (p != null) {
        p.future().complete(reply);
      }
    }

    @Override
    public void onDisconnect(long generation, IOException cause) {
      for (Map.Entry<Long, Pending> e : pending.entrySet()) {
        Pending p = e.getValue();
        if (p.url().equals(url) && p.generation() == generation && pending.remove(e.getKey(), p)) {
          p.future().completeExceptionally(new CroupierException(ErrorCode.UNAVAILABLE,
              "connection to " + url + " lost before the reply: " + cause.getMessage()));
        }
      }
    }
  }
}
