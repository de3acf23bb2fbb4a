package io.croupier.client;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.croupier.proto.BatchHeader;
import io.croupier.proto.WinnerRuns;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * The reader's pure rules without servers (PROTOCOL §5.3): winners, dedupe, the proof over a
 * map range, and chunk parsing with digests. Prints "ok" or exits 1 naming the failed check.
 */
public final class ReaderChecks {
  private static final byte[] KEY = new byte[32];

  private ReaderChecks() {}

  public static void main(String[] args) throws Exception {
    WinnerRuns winners = WinnerRuns.parse(new ObjectMapper().readTree("[[0,2,0],[2,3,1],[3,4,0]]"));
    List<int[]> declared = List.of(new int[] {0, 4});
    BatchSelector s = new BatchSelector(winners, 1, 3);
    check(!s.wanted(header(0, 0, 0, false)), "map 0 is outside [1, 3)");
    check(!s.wanted(header(2, 0, 0, false)), "attempt 0 of map 2 lost");
    check(s.offer(header(1, 0, 0, false)) && !s.offer(header(1, 0, 0, false)), "a repeated batch is kept once");
    s.offer(header(1, 0, 1, false));
    s.offer(header(1, 0, 2, true));
    s.offer(header(2, 1, 0, true));
    check(s.verdict(declared).isEmpty(), "maps 1 and 2 are complete: " + s.verdict(declared));
    BatchSelector missing = new BatchSelector(winners, 1, 3);
    missing.offer(header(1, 0, 1, false));
    missing.offer(header(1, 0, 2, true));
    List<BatchSelector.Missing> m = missing.verdict(declared);
    check(m.size() == 2 && m.get(0).mapId() == 1 && m.get(1).mapId() == 2, "map 1 lacks batch 0, map 2 its seal: " + m);
    BatchSelector undeclared = new BatchSelector(winners, 0, 4);
    undeclared.offer(header(3, 0, 0, false));
    undeclared.offer(header(3, 0, 1, true));
    List<BatchSelector.Missing> u = undeclared.verdict(List.of(new int[] {0, 0}));
    check(u.size() == 1 && u.get(0).mapId() == 3 && u.get(0).reason().contains("did not declare"), "undeclared: " + u);
    check(undeclared.verdict(null).isEmpty(), "without maps only the maps seen are checked");
    chunks(winners);
    System.out.println("ok");
  }

  private static void chunks(WinnerRuns winners) throws Exception {
    byte[] good = "payload".getBytes(StandardCharsets.UTF_8);
    ByteBuffer chunk = ByteBuffer.allocate(4 * 36 + 3 * good.length);
    put(chunk, BatchHeader.data(KEY, 1, 0, 0, good, 0, good.length), good);
    put(chunk, BatchHeader.data(KEY, 2, 0, 0, good, 0, good.length), "garbage".getBytes(StandardCharsets.UTF_8));
    put(chunk, BatchHeader.sealOf(KEY, 1, 0, 1), new byte[0]);
    put(chunk, BatchHeader.data(KEY, 0, 0, 0, good, 0, good.length), good);
    byte[] bytes = java.util.Arrays.copyOf(chunk.array(), chunk.position());
    List<ChunkParser.Parsed> parsed = ChunkParser.parse(bytes, new BatchSelector(winners, 1, 3), KEY);
    check(parsed.size() == 2, "map 1's batch and seal are kept; map 2's losing attempt is skipped unverified");
    bytes[36 + 2] ^= 1; // a bit of map 1's data
    try {
      ChunkParser.parse(bytes, new BatchSelector(winners, 1, 3), KEY);
      check(false, "a bad digest of a kept batch fails the chunk");
    } catch (ChunkParser.CorruptChunkException expected) {
      // the reader then reads the other copy
    }
    try {
      ChunkParser.parse(java.util.Arrays.copyOf(bytes, 40), new BatchSelector(winners, 1, 3), KEY);
      check(false, "a cut chunk is corrupt");
    } catch (ChunkParser.CorruptChunkException expected) {
      // likewise
    }
  }

  private static void put(ByteBuffer chunk, BatchHeader h, byte[] data) {
    h.writeTo(chunk);
    chunk.put(data);
  }

  private static BatchHeader header(int map, int attempt, int batch, boolean seal) {
    return seal ? BatchHeader.sealOf(KEY, map, attempt, batch) : new BatchHeader(map, attempt, batch, 0, 0, new byte[16]);
  }

  private static void check(boolean ok, String what) {
    if (!ok) {
      System.out.println("FAILED " + what);
      System.exit(1);
    }
  }
}
