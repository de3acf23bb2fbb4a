package io.croupier.client;

import java.io.ByteArrayOutputStream;
import java.util.ArrayList;
import java.util.List;

/**
 * Per-partition record buffers of {@link MapWriter#write}: each record is framed as the Python
 * SDK frames them (u32 little-endian length, then the bytes, PROTOCOL §5.1). A buffer is handed
 * back once it holds {@code bufferSize} bytes, and the largest one whenever all of them together
 * pass {@code memoryLimit}.
 */
final class RecordBuffers {
  /** A full buffer: its partition and its framed records. */
  record Full(int partition, byte[] data) {}

  private final ByteArrayOutputStream[] buffers;
  private final int bufferSize;
  private final long memoryLimit;
  private long held;

  RecordBuffers(int partitions, int bufferSize, long memoryLimit) {
    this.buffers = new ByteArrayOutputStream[partitions];
    this.bufferSize = Math.max(1, bufferSize);
    this.memoryLimit = Math.max(bufferSize, memoryLimit);
  }

  /** Adds a record; returns the buffers to push now. */
  List<Full> add(int partition, byte[] record) {
    ByteArrayOutputStream b = buffers[partition];
    if (b == null) {
      b = buffers[partition] = new ByteArrayOutputStream(Math.min(bufferSize, 4096 + record.length));
    }
    int n = record.length;
    b.write(n & 0xff);
    b.write(n >>> 8 & 0xff);
    b.write(n >>> 16 & 0xff);
    b.write(n >>> 24 & 0xff);
    b.writeBytes(record);
    held += 4 + n;
    List<Full> out = new ArrayList<>(1);
    if (b.size() >= bufferSize) {
      take(partition, out);
    } else if (held > memoryLimit) {
      take(largest(), out);
    }
    return out;
  }

  private int largest() {
    int best = -1;
    for (int p = 0; p < buffers.length; p++) {
      if (buffers[p] != null && (best < 0 || buffers[p].size() > buffers[best].size())) {
        best = p;
      }
    }
    return best;
  }

  private void take(int p, List<Full> out) {
    ByteArrayOutputStream b = buffers[p];
    buffers[p] = null;
    held -= b.size();
    out.add(new Full(p, b.toByteArray()));
  }

  /** Every non-empty buffer. */
  List<Full> flushAll() {
    List<Full> out = new ArrayList<>();
    for (int p = 0; p < buffers.length; p++) {
      if (buffers[p] != null) {
        take(p, out);
      }
    }
    return out;
  }

  /** Forgets everything buffered. */
  void drop() {
    java.util.Arrays.fill(buffers, null);
    held = 0;
  }
}
