package io.croupier.zmtp;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ReadableByteChannel;
import java.util.ArrayList;
import java.util.List;

/**
 * Reads ZMTP 3.0 frames from a channel: a flags byte (bit 0 MORE, bit 1 LONG, bit 2 COMMAND),
 * a 1-byte or 8-byte big-endian size, the body. Small frames come through a 64 KiB buffer; a
 * large body is read straight into its own array.
 */
final class FrameReader {
  static final int MORE = 1;
  static final int LONG = 2;
  static final int COMMAND = 4;

  private final ReadableByteChannel ch;
  private final ByteBuffer buf = ByteBuffer.allocate(64 * 1024);
  private final long maxFrame;

  /** A reader of {@code ch} that refuses frames above {@code maxFrame} bytes. */
  FrameReader(ReadableByteChannel ch, long maxFrame) {
    this.ch = ch;
    this.maxFrame = maxFrame;
    buf.flip();
  }

  /** One frame: its flags and body. */
  record Frame(int flags, byte[] body) {
    boolean more() {
      return (flags & MORE) != 0;
    }

    boolean command() {
      return (flags & COMMAND) != 0;
    }
  }

  /** Exactly {@code n} bytes (for the greeting). */
  byte[] readExactly(int n) throws IOException {
    byte[] out = new byte[n];
    fill(ByteBuffer.wrap(out));
    return out;
  }

  /** The next frame. */
  Frame readFrame() throws IOException {
    ensure(1);
    int flags = buf.get() & 0xff;
    if ((flags & ~(MORE | LONG | COMMAND)) != 0) {
      throw new ZmtpException("malformed ZMTP frame flags " + flags, false);
    }
    long size;
    if ((flags & LONG) != 0) {
      ensure(8);
      size = buf.getLong();
    } else {
      ensure(1);
      size = buf.get() & 0xff;
    }
    if (size < 0 || size > maxFrame) {
      throw new ZmtpException("ZMTP frame of " + size + " bytes is over the limit " + maxFrame, false);
    }
    byte[] body = new byte[(int) size];
    fill(ByteBuffer.wrap(body));
    return new Frame(flags, body);
  }

  /** The frames of the next message (commands between messages are skipped and returned null). */
  List<byte[]> readMessage() throws IOException {
    List<byte[]> parts = new ArrayList<>();
    while (true) {
      Frame f = readFrame();
      if (f.command()) {
        Command c = Command.decode(f.body());
        if ("ERROR".equals(c.name())) {
          throw new ZmtpException("server sent ZMTP ERROR " + c.reason(), false);
        }
        continue; // PING and the like: servers set no heartbeats, nothing to answer
      }
      parts.add(f.body());
      if (!f.more()) {
        return parts;
      }
    }
  }

  private void ensure(int n) throws IOException {
    if (buf.remaining() >= n) {
      return;
    }
    buf.compact();
    while (buf.position() < n) {
      if (ch.read(buf) < 0) {
        throw new EOFException("connection closed by the server");
      }
    }
    buf.flip();
  }

  private void fill(ByteBuffer dst) throws IOException {
    int take = Math.min(buf.remaining(), dst.remaining());
    if (take > 0) {
      ByteBuffer slice = buf.slice();
      slice.limit(take);
      dst.put(slice);
      buf.position(buf.position() + take);
    }
    while (dst.hasRemaining()) {
      if (ch.read(dst) < 0) {
        throw new EOFException("connection closed by the server");
      }
    }
  }
}
