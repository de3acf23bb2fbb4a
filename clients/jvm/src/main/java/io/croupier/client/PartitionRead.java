package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.Json;
import io.croupier.proto.MsgType;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.logging.Logger;

/**
 * Reads one committed partition for a map range (PROTOCOL §5.3): every epoch oldest first, the
 * primary copy else the replica (copies the commit failed, and those on lost workers, last);
 * keeps each winning batch once; then the proof. If it fails, the locations are asked again and
 * every copy not read yet is read, and only then the partition is declared lost.
 */
final class PartitionRead {
  private static final Logger LOG = Logger.getLogger(PartitionRead.class.getName());

  /** Where kept batches go. */
  interface Sink {
    void emit(Batch b) throws InterruptedException;
  }

  private final Shuffle shuffle;
  private final PartitionEntry entry;
  private final int startMap;
  private final int endMap;
  private final SmallFetcher small;
  private final BatchSelector selector;
  private final Set<String> tried = new HashSet<>();
  private final List<String> errors = new ArrayList<>();
  private final Set<String> failedWorkers = new TreeSet<>();
  private final Map<Integer, Integer> outcome = new HashMap<>(); // epoch -> 0 absent, 1 failed, 2 read
  private Sink sink;

  PartitionRead(Shuffle shuffle, PartitionEntry entry, int startMap, int endMap, SmallFetcher small) {
    this.shuffle = shuffle;
    this.entry = entry;
    this.startMap = startMap;
    this.endMap = endMap;
    this.small = small;
    this.selector = new BatchSelector(entry.winners(), startMap, endMap);
  }

  /** Reads the partition into {@code sink}; returns null when complete, else the loss (not thrown). */
  DataLostException run(Sink out) throws InterruptedException {
    this.sink = out;
    if (!entry.declaresAny(startMap, endMap)) {
      return null; // no winning map of the range declared it: empty, nothing to read
    }
    if (entry.lost()) {
      LOG.warning("croupier: " + context() + ": the commit lost data here; reading every copy");
    }
    for (Location loc : entry.locations()) {
      readLocation(loc);
    }
    if (complete()) {
      return null;
    }
    readTheRest();
    return complete() ? null : lost();
  }

  private String context() {
    return "shuffle " + shuffle.appId() + "/" + shuffle.id() + " partition " + entry.partition();
  }

  private void readLocation(Location loc) throws InterruptedException {
    List<Location.Copy> copies = new ArrayList<>();
    for (Location.Copy c : loc.copies()) {
      if (entry.failedAtCommit(c)) {
        errors.add("epoch " + loc.epoch() + " " + c.address().workerId() + " (" + c.role() + "): failed at commit");
        failedWorkers.add(c.address().workerId());
      } else {
        copies.add(c);
      }
    }
    copies.sort((a, b) -> Boolean.compare(a.address().lost(), b.address().lost()));
    if (copies.isEmpty()) {
      note(loc.epoch(), 1);
    }
    for (Location.Copy c : copies) {
      int o = tryCopy(c);
      note(loc.epoch(), o);
      if (o == 2) {
        return;
      }
    }
  }

  private void readTheRest() throws InterruptedException {
    List<Location> all = new ArrayList<>(entry.locations());
    try {
      JsonNode fresh = shuffle.master(MsgType.GET_LOCATIONS, shuffle.body().put("partition", entry.partition()));
      for (JsonNode l : fresh.path("locations")) {
        all.add(Location.parse(l));
      }
    } catch (CroupierException e) {
      LOG.warning("croupier: cannot refresh the locations of " + context() + ": " + e.getMessage());
    }
    for (Location loc : all) {
      for (Location.Copy c : loc.copies()) {
        if (!tried.contains(id(c)) && tryCopy(c) == 2) {
          note(loc.epoch(), 2);
        }
      }
    }
  }

  private static String id(Location.Copy c) {
    return c.location().epoch() + "/" + c.address().workerId() + "/" + c.address().incarnation();
  }

  /** Reads one copy; 2 read, 1 failed, 0 absent (the worker does not hold it). */
  private int tryCopy(Location.Copy c) throws InterruptedException {
    tried.add(id(c));
    try {
      SmallFetcher.Result r = small == null ? null : small.result(entry.partition(), c);
      if (r == null) {
        new CopyReader(shuffle, entry.partition()).read(c, this::chunk);
      } else if (r.data() != null) {
        chunk(r.data());
      } else {
        throw new CopyReader.CopyFailedException(r.error(), r.absent());
      }
      return 2;
    } catch (CopyReader.CopyFailedException e) {
      errors.add("epoch " + c.location().epoch() + " " + c.address().workerId() + " (" + c.role() + "): " + e.getMessage());
      failedWorkers.add(c.address().workerId());
      LOG.log(e.absent ? java.util.logging.Level.FINE : java.util.logging.Level.WARNING, "croupier: " + context()
          + " epoch " + c.location().epoch() + ": " + c.role() + " copy on " + c.address().workerId() + " failed: "
          + e.getMessage());
      return e.absent ? 0 : 1;
    }
  }

  private void chunk(byte[] chunk) throws CopyReader.CopyFailedException, InterruptedException {
    List<ChunkParser.Parsed> parsed;
    try {
      parsed = ChunkParser.parse(chunk, selector, shuffle.key());
    } catch (ChunkParser.CorruptChunkException e) {
      throw new CopyReader.CopyFailedException(e.getMessage(), false);
    }
    for (ChunkParser.Parsed p : parsed) {
      if (selector.isNew(p.header())) {
        selector.offer(p.header());
        byte[] data = Arrays.copyOfRange(chunk, p.offset(), p.offset() + p.header().length());
        sink.emit(new Batch(p.header().mapId(), entry.partition(), data));
      } else {
        selector.offer(p.header());
      }
    }
  }

  private void note(int epoch, int o) {
    outcome.merge(epoch, o, Math::max);
  }

  private boolean complete() {
    if (!selector.verdict(entry.maps()).isEmpty()) {
      return false;
    }
    return entry.maps() != null || !outcome.containsValue(1);
  }

  private DataLostException lost() {
    List<BatchSelector.Missing> missing = selector.verdict(entry.maps());
    Set<String> workers = new TreeSet<>(failedWorkers);
    if (workers.isEmpty()) {
      for (Location l : entry.locations()) {
        l.copies().forEach(c -> workers.add(c.address().workerId()));
      }
    }
    TreeSet<Integer> maps = new TreeSet<>();
    StringBuilder why = new StringBuilder();
    for (BatchSelector.Missing m : missing) {
      maps.add(m.mapId());
      if (why.length() < 500) {
        why.append(why.length() == 0 ? "" : "; ").append("map ").append(m.mapId()).append(": ").append(m.reason());
      }
    }
    int[][] pairs = maps.stream().map(m -> new int[] {m, entry.partition()}).toArray(int[][]::new);
    String msg = context() + ": " + (missing.isEmpty() ? "no copy of some epoch could be read" : "incomplete partition ("
        + why + ")") + (errors.isEmpty() ? "" : "; copies: " + String.join("; ", errors));
    return new DataLostException(msg, pairs, new ArrayList<>(workers), details(pairs, workers));
  }

  private JsonNode details(int[][] pairs, Set<String> workers) {
    var d = Json.object();
    d.putArray("partitions").add(entry.partition());
    var maps = d.putArray("maps");
    for (int[] p : pairs) {
      maps.addArray().add(p[0]).add(p[1]);
    }
    workers.forEach(d.putArray("workers")::add);
    return d;
  }
}
