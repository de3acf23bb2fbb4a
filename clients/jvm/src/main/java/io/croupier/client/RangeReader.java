package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.Json;
import io.croupier.proto.MsgType;
import io.croupier.proto.WinnerRuns;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.Set;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The {@link BatchReader} of {@link Shuffle#reader}: a daemon thread reads the partitions in
 * order ({@code GET_LOCATIONS_BATCH} of up to 10,000 until committed, {@code FETCH_SMALL} for
 * groups of partitions, then {@link PartitionRead} each) and hands batches over through a
 * bounded queue. Partitions found lost do not stop the others: at the end one {@link
 * DataLostException} names every lost (map, partition) pair of the range.
 */
final class RangeReader implements BatchReader {
  private static final int MAX_PER_CALL = 10_000;
  private static final Object END = new Object();

  private final Shuffle shuffle;
  private final int startMap;
  private final int endMap;
  private final int startPartition;
  private final int endPartition;
  private final BlockingQueue<Object> queue = new ArrayBlockingQueue<>(64);
  private final Thread producer;
  private volatile boolean closed;
  private Object next;

  RangeReader(Shuffle shuffle, int startMap, int endMap, int startPartition, int endPartition) {
    this.shuffle = shuffle;
    this.startMap = startMap;
    this.endMap = endMap;
    this.startPartition = startPartition;
    this.endPartition = endPartition;
    this.producer = new Thread(this::produce, "croupier-reader-" + shuffle.appId() + "-" + shuffle.id());
    producer.setDaemon(true);
    producer.start();
  }

  private void produce() {
    Object last;
    try {
      List<DataLostException> lost = new ArrayList<>();
      if (startMap < endMap) {
        for (int p = startPartition; p < endPartition; p += MAX_PER_CALL) {
          readGroup(p, Math.min(endPartition, p + MAX_PER_CALL), lost);
        }
      }
      last = lost.isEmpty() ? END : merge(lost);
    } catch (InterruptedException e) {
      return;
    } catch (RuntimeException e) {
      last = e;
    }
    try {
      put(last);
    } catch (InterruptedException e) {
      // closed
    }
  }

  private void readGroup(int from, int to, List<DataLostException> lost) throws InterruptedException {
    List<PartitionEntry> entries = locations(from, to);
    int group = shuffle.client().options().smallFetchBatch();
    for (int i = 0; i < entries.size(); i += Math.max(1, group)) {
      List<PartitionEntry> some = entries.subList(i, Math.min(entries.size(), i + Math.max(1, group)));
      SmallFetcher small = null;
      if (group > 0) {
        small = new SmallFetcher(shuffle);
        small.fetch(some.stream().filter(e -> e.declaresAny(startMap, endMap)).toList());
      }
      for (PartitionEntry e : some) {
        DataLostException l = new PartitionRead(shuffle, e, startMap, endMap, small).run(this::put);
        if (l != null) {
          lost.add(l);
        }
      }
    }
  }

  /** The committed locations of partitions [from, to): asked until the shuffle is committed. */
  private List<PartitionEntry> locations(int from, int to) throws InterruptedException {
    ObjectNode body = shuffle.body();
    ArrayNode parts = body.putArray("partitions");
    for (int p = from; p < to; p++) {
      parts.add(p);
    }
    long deadline = System.nanoTime() + shuffle.client().options().commitWaitTimeout().toNanos();
    long pause = 20;
    while (true) {
      JsonNode reply = shuffle.master(MsgType.GET_LOCATIONS_BATCH, body);
      if (reply.path("committed").asBoolean()) {
        WinnerRuns winners = WinnerRuns.parse(reply.path("winner_runs"));
        List<PartitionEntry> out = new ArrayList<>();
        for (JsonNode e : reply.path("partitions")) {
          out.add(PartitionEntry.parse(e, winners));
        }
        return out;
      }
      if (System.nanoTime() > deadline) {
        throw new CroupierException(ErrorCode.NOT_COMMITTED, "shuffle " + shuffle.appId() + "/" + shuffle.id()
            + " is not committed after " + shuffle.client().options().commitWaitTimeout().toSeconds() + " s");
      }
      if (shuffle.client().options().failWhileRerunning()) {
        List<int[]> rerunning = shuffle.lostMaps().rerunning();
        if (!rerunning.isEmpty()) {
          StringBuilder maps = new StringBuilder();
          for (int[] r : rerunning) {
            maps.append(maps.length() == 0 ? "" : ", ").append(r[0]).append("..").append(r[1] - 1);
          }
          throw new CroupierException(ErrorCode.NOT_COMMITTED, "shuffle " + shuffle.appId() + "/" + shuffle.id()
              + " is not committed: maps " + maps + " are being rerun");
        }
      }
      Thread.sleep(pause);
      pause = Math.min(1000, pause * 2);
    }
  }

  private static DataLostException merge(List<DataLostException> lost) {
    if (lost.size() == 1) {
      return lost.get(0);
    }
    List<int[]> pairs = new ArrayList<>();
    Set<String> workers = new LinkedHashSet<>();
    ObjectNode d = Json.object();
    ArrayNode parts = d.putArray("partitions");
    ArrayNode maps = d.putArray("maps");
    StringBuilder msg = new StringBuilder(lost.size() + " partitions lost: ");
    for (DataLostException l : lost) {
      for (int[] p : l.pairs()) {
        pairs.add(p);
        maps.addArray().add(p[0]).add(p[1]);
      }
      l.details().path("partitions").forEach(parts::add);
      workers.addAll(l.workers());
      if (msg.length() < 1000) {
        msg.append(l.getMessage()).append(" | ");
      }
    }
    workers.forEach(d.putArray("workers")::add);
    return new DataLostException(msg.toString(), pairs.toArray(new int[0][]), new ArrayList<>(workers), d);
  }

  private void put(Object item) throws InterruptedException {
    while (!queue.offer(item, 100, TimeUnit.MILLISECONDS)) {
      if (closed) {
        throw new InterruptedException("reader closed");
      }
    }
  }

  @Override
  public boolean hasNext() {
    if (next == null) {
      if (closed) {
        return false;
      }
      try {
        next = queue.take();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new CroupierException(ErrorCode.UNAVAILABLE, "interrupted while reading", e);
      }
    }
    if (next instanceof RuntimeException e) {
      throw e;
    }
    return next != END;
  }

  @Override
  public Batch next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    Batch b = (Batch) next;
    next = null;
    return b;
  }

  @Override
  public void close() {
    closed = true;
    producer.interrupt();
    queue.clear();
  }
}
