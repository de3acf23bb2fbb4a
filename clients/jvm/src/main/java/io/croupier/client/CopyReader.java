package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.MsgType;
import io.croupier.proto.Reply;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * Reads one copy of a location chunk by chunk (PROTOCOL §5.2 Fetch): {@code OPEN_STREAM} and
 * {@code FETCH_CHUNK} 0 together (one round trip less), then the following chunks with a few
 * requests in flight. {@code UNKNOWN_SHUFFLE} and {@code NOT_COMMITTED} make the copy absent;
 * any other failure makes it failed. Both are {@link CopyFailedException}s.
 */
final class CopyReader {
  /** A chunk's consumer; it may fail the copy (a corrupt chunk). */
  interface ChunkSink {
    void accept(byte[] chunk) throws CopyFailedException, InterruptedException;
  }

  /** This copy cannot be read: try the other. {@code absent}: the worker does not hold it. */
  static final class CopyFailedException extends Exception {
    private static final long serialVersionUID = 1L;
    final boolean absent;

    CopyFailedException(String message, boolean absent) {
      super(message);
      this.absent = absent;
    }
  }

  private final Shuffle shuffle;
  private final int partition;

  CopyReader(Shuffle shuffle, int partition) {
    this.shuffle = shuffle;
    this.partition = partition;
  }

  private ObjectNode base(Location.Copy c) {
    return shuffle.body().put("partition", partition).put("epoch", c.location().epoch()).put("role", c.role())
        .put("incarnation", c.address().incarnation());
  }

  /** Reads every chunk of the copy into {@code sink}, in order. */
  void read(Location.Copy c, ChunkSink sink) throws CopyFailedException, InterruptedException {
    if (!c.address().known()) {
      throw new CopyFailedException("the worker is no longer registered", false);
    }
    ClientOptions o = shuffle.client().options();
    Duration timeout = c.address().lost() ? Duration.ofMillis(Math.min(2000, o.fetchTimeout().toMillis())) : o.fetchTimeout();
    String url = c.address().fetchUrl();
    ArrayDeque<CompletableFuture<Reply>> ahead = new ArrayDeque<>();
    ahead.add(fetch(url, c, 0, timeout));
    Reply opened = await(send(url, MsgType.OPEN_STREAM, base(c), timeout), url, timeout, true);
    int count = opened.body().path("chunks").size();
    int sent = 1;
    for (int i = 0; i < count; i++) {
      while (sent < count && sent < i + Math.max(1, o.fetchChunksInFlight())) {
        ahead.add(fetch(url, c, sent++, timeout));
      }
      Reply r = await(ahead.poll(), url, timeout, false);
      List<byte[]> payloads = r.payloads();
      JsonNode len = r.body().path("length");
      if (payloads.isEmpty() || len.asLong(-1) != payloads.get(0).length) {
        throw new CopyFailedException("chunk " + i + " from " + url + ": its data is missing or of the wrong length", false);
      }
      sink.accept(payloads.get(0));
    }
  }

  private CompletableFuture<Reply> fetch(String url, Location.Copy c, int chunk, Duration timeout) {
    return send(url, MsgType.FETCH_CHUNK, base(c).put("chunk", chunk), timeout);
  }

  private CompletableFuture<Reply> send(String url, int type, ObjectNode body, Duration timeout) {
    return shuffle.client().rpc().send(url, Rpc.SMALL_PORT, type, body, List.of(), shuffle.key(), timeout);
  }

  private static Reply await(CompletableFuture<Reply> f, String url, Duration timeout, boolean open)
      throws CopyFailedException, InterruptedException {
    Reply r;
    try {
      r = Rpc.await(f, url, timeout);
    } catch (CroupierException e) {
      if (Thread.interrupted()) {
        throw new InterruptedException();
      }
      throw new CopyFailedException(e.getMessage(), false);
    }
    if (!r.ok()) {
      CroupierException e = r.error();
      boolean absent = open && (e.code() == ErrorCode.UNKNOWN_SHUFFLE || e.code() == ErrorCode.NOT_COMMITTED);
      throw new CopyFailedException(e.getMessage(), absent);
    }
    return r;
  }
}
