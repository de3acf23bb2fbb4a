package io.croupier.zmtp;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.GatheringByteChannel;
import java.util.List;

/** Writes ZMTP 3.0 frames: short frames (size &lt; 256) with a 1-byte size, others long. */
final class FrameWriter {
  private final GatheringByteChannel ch;

  FrameWriter(GatheringByteChannel ch) {
    this.ch = ch;
  }

  /** The flags and size prefix of one frame. */
  static ByteBuffer prefix(int flags, int size) {
    ByteBuffer p;
    if (size < 256) {
      p = ByteBuffer.allocate(2);
      p.put((byte) flags);
      p.put((byte) size);
    } else {
      p = ByteBuffer.allocate(9);
      p.put((byte) (flags | FrameReader.LONG));
      p.putLong(size);
    }
    return p.flip();
  }

  /** One command frame. */
  void writeCommand(Command c) throws IOException {
    byte[] body = c.encode();
    writeAll(new ByteBuffer[] {prefix(FrameReader.COMMAND, body.length), ByteBuffer.wrap(body)});
  }

  /** The raw bytes (the greeting). */
  void writeRaw(byte[] bytes) throws IOException {
    writeAll(new ByteBuffer[] {ByteBuffer.wrap(bytes)});
  }

  /** One multipart message, MORE set on every frame but the last. */
  void writeMessage(List<ByteBuffer> frames) throws IOException {
    ByteBuffer[] out = new ByteBuffer[frames.size() * 2];
    for (int i = 0; i < frames.size(); i++) {
      ByteBuffer f = frames.get(i).duplicate();
      int more = i + 1 < frames.size() ? FrameReader.MORE : 0;
      out[2 * i] = prefix(more, f.remaining());
      out[2 * i + 1] = f;
    }
    writeAll(out);
  }

  private void writeAll(ByteBuffer[] bufs) throws IOException {
    long left = 0;
    for (ByteBuffer b : bufs) {
      left += b.remaining();
    }
    while (left > 0) {
      left -= ch.write(bufs);
    }
  }
}
