package io.croupier.client;

import io.croupier.proto.BatchHeader;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * Splits a fetched chunk (batches back to back, seals included: PROTOCOL §5.2) into headers and
 * data, and verifies the digest of every batch the selector wants. A malformed chunk or a bad
 * digest of a wanted batch fails the whole chunk ({@link CorruptChunkException}): the reader
 * then reads the other copy. Unwanted batches are skipped unverified.
 */
final class ChunkParser {
  private ChunkParser() {}

  /**
   * One wanted batch of a chunk.
   *
   * @param header its header
   * @param offset where its data starts in the chunk
   */
  record Parsed(BatchHeader header, int offset) {}

  /** A malformed chunk or a bad digest. */
  static final class CorruptChunkException extends Exception {
    private static final long serialVersionUID = 1L;

    CorruptChunkException(String message) {
      super(message);
    }
  }

  /** The wanted batches (and seals) of {@code chunk}, digests checked with {@code key}. */
  static List<Parsed> parse(byte[] chunk, BatchSelector selector, byte[] key) throws CorruptChunkException {
    List<Parsed> out = new ArrayList<>();
    ByteBuffer buf = ByteBuffer.wrap(chunk);
    while (buf.hasRemaining()) {
      int at = buf.position();
      if (buf.remaining() < BatchHeader.SIZE) {
        throw new CorruptChunkException("chunk ends inside a batch header at offset " + at);
      }
      BatchHeader h = BatchHeader.read(buf);
      if ((h.flags() & ~BatchHeader.SEAL) != 0 || h.length() < 0 || h.length() > buf.remaining()
          || (h.seal() && h.length() != 0)) {
        throw new CorruptChunkException("malformed batch header at offset " + at);
      }
      int dataAt = buf.position();
      buf.position(dataAt + h.length());
      if (!selector.wanted(h)) {
        continue;
      }
      if (!h.verify(key, chunk, dataAt)) {
        throw new CorruptChunkException("digest mismatch in batch at offset " + at + " (map " + h.mapId()
            + " attempt " + h.attemptId() + " batch " + h.batchId() + ")");
      }
      out.add(new Parsed(h, dataAt));
    }
    return out;
  }
}
