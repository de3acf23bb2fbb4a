package io.croupier.zmtp;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.GatheringByteChannel;
import java.nio.channels.WritableByteChannel;
import java.util.List;

/**
 * ZMTP 3.0 framing without a server: short and long frames with MORE, commands between
 * messages, a READY's properties, and the frame limit. Prints "ok" or exits 1.
 */
public final class FrameChecks {
  private FrameChecks() {}

  public static void main(String[] args) throws Exception {
    ByteArrayOutputStream sink = new ByteArrayOutputStream();
    WritableByteChannel raw = Channels.newChannel(sink);
    FrameWriter w = new FrameWriter(new Gathering(raw));
    byte[] big = new byte[70_000];
    big[69_999] = 7;
    w.writeCommand(Command.ready("DEALER"));
    w.writeMessage(List.of(ByteBuffer.wrap(new byte[] {1, 2}), ByteBuffer.wrap(big), ByteBuffer.allocate(0)));
    byte[] wire = sink.toByteArray();
    check(wire[0] == 4, "a short command frame");
    int msg = 2 + (wire[1] & 0xff);
    check(wire[msg] == 1 && wire[msg + 1] == 2, "a short frame with MORE: flags 1, size 2");
    check(wire[msg + 4] == 3 && ByteBuffer.wrap(wire).getLong(msg + 5) == 70_000, "a long frame with MORE, 8-byte big-endian size");
    int last = msg + 4 + 9 + 70_000;
    check(wire[last] == 0 && wire[last + 1] == 0 && wire.length == last + 2, "the last frame: no MORE, size 0");
    FrameReader r = new FrameReader(Channels.newChannel(new java.io.ByteArrayInputStream(wire)), 1 << 20);
    FrameReader.Frame ready = r.readFrame();
    check(ready.command() && "DEALER".equals(Command.decode(ready.body()).properties().get("Socket-Type")), "READY");
    List<byte[]> parts = r.readMessage();
    check(parts.size() == 3 && parts.get(1).length == 70_000 && parts.get(1)[69_999] == 7 && parts.get(2).length == 0,
        "the message's three frames");
    FrameReader small = new FrameReader(Channels.newChannel(new java.io.ByteArrayInputStream(wire)), 1000);
    small.readFrame();
    small.readFrame();
    try {
      small.readFrame();
      check(false, "a frame over the limit is refused");
    } catch (ZmtpException expected) {
      // the connection is dropped
    }
    check("400".equals(Command.decode(new Command("ERROR", new byte[] {3, '4', '0', '0'}).encode()).reason()), "ERROR");
    byte[] g = Greeting.client();
    check(g.length == 64 && (g[0] & 0xff) == 0xff && g[9] == 0x7f && g[10] == 3 && "NULL".equals(Greeting.mechanism(g)),
        "the greeting");
    byte[] curve = g.clone();
    System.arraycopy("CURVE".getBytes(java.nio.charset.StandardCharsets.US_ASCII), 0, curve, 12, 5);
    try {
      Greeting.check(curve, "tcp://x:1");
      check(false, "a CURVE server is refused");
    } catch (ZmtpException e) {
      check(e.permanent() && e.getMessage().contains("--curve"), "the refusal names --curve");
    }
    System.out.println("ok");
  }

  private static void check(boolean ok, String what) {
    if (!ok) {
      System.out.println("FAILED " + what);
      System.exit(1);
    }
  }

  /** A gathering channel over a plain one (the writer needs gathering writes). */
  private record Gathering(WritableByteChannel ch) implements GatheringByteChannel {
    @Override
    public long write(ByteBuffer[] srcs, int offset, int length) throws java.io.IOException {
      long n = 0;
      for (int i = offset; i < offset + length; i++) {
        while (srcs[i].hasRemaining()) {
          n += ch.write(srcs[i]);
        }
      }
      return n;
    }

    @Override
    public long write(ByteBuffer[] srcs) throws java.io.IOException {
      return write(srcs, 0, srcs.length);
    }

    @Override
    public int write(ByteBuffer src) throws java.io.IOException {
      return ch.write(src);
    }

    @Override
    public boolean isOpen() {
      return ch.isOpen();
    }

    @Override
    public void close() throws java.io.IOException {
      ch.close();
    }
  }
}
