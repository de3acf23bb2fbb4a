package io.croupier.zmtp;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.List;
import java.util.Timer;
import java.util.TimerTask;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * One TCP connection that finished the ZMTP 3.0 NULL handshake as a DEALER: the greetings, our
 * READY ({@code Socket-Type=DEALER}), then the server's READY, or its ERROR (a ZAP refusal such
 * as "400", the connection budget: {@link ZmtpRefusedException}).
 */
final class Connection implements AutoCloseable {
  private static final Timer WATCHDOG = new Timer("croupier-zmtp-handshake", true);
  /** The largest frame a client accepts from a server (a fetched chunk is a few MiB). */
  static final long MAX_RECEIVED_FRAME = 1L << 30;

  private final SocketChannel ch;
  private final FrameReader reader;
  private final FrameWriter writer;
  private final LinkedBlockingQueue<List<ByteBuffer>> outbox = new LinkedBlockingQueue<>();

  private Connection(SocketChannel ch) {
    this.ch = ch;
    this.reader = new FrameReader(ch, MAX_RECEIVED_FRAME);
    this.writer = new FrameWriter(ch);
  }

  /**
   * Connects to {@code addr} and runs the handshake within {@code timeout}.
   *
   * @throws ZmtpException on refusal, a wrong mechanism (permanent), a timeout or I/O errors
   */
  static Connection open(InetSocketAddress addr, String peer, Duration timeout) throws ZmtpException {
    SocketChannel ch = null;
    TimerTask watchdog = null;
    try {
      ch = SocketChannel.open();
      ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
      ch.socket().connect(addr, (int) Math.max(1, timeout.toMillis()));
      final SocketChannel toClose = ch;
      watchdog = new TimerTask() {
        @Override
        public void run() {
          closeQuietly(toClose);
        }
      };
      WATCHDOG.schedule(watchdog, Math.max(1, timeout.toMillis()));
      Connection c = new Connection(ch);
      c.handshake(peer);
      if (!watchdog.cancel()) {
        throw new ZmtpException("ZMTP handshake with " + peer + " took longer than " + timeout, false);
      }
      return c;
    } catch (ZmtpException e) {
      closeQuietly(ch);
      throw e;
    } catch (IOException e) {
      closeQuietly(ch);
      boolean late = watchdog != null && !watchdog.cancel();
      String why = late ? "no ZMTP handshake within " + timeout : e.toString();
      throw new ZmtpException("cannot connect to " + peer + ": " + why, e);
    }
  }

  private void handshake(String peer) throws IOException {
    // RFC 23: the signature and major version first; libzmq then sends its whole greeting, so
    // its mechanism is checked before ours goes out (a CURVE server closes a NULL peer at once)
    byte[] ours = Greeting.client();
    writer.writeRaw(java.util.Arrays.copyOf(ours, 11));
    byte[] greeting;
    try {
      greeting = reader.readExactly(Greeting.SIZE);
    } catch (java.io.EOFException e) {
      throw new ZmtpException(peer + " closed the connection during the ZMTP greeting", false);
    }
    Greeting.check(greeting, peer);
    writer.writeRaw(java.util.Arrays.copyOfRange(ours, 11, Greeting.SIZE));
    writer.writeCommand(Command.ready("DEALER"));
    FrameReader.Frame f = reader.readFrame();
    if (!f.command()) {
      throw new ZmtpException(peer + " sent a message before its READY", false);
    }
    Command c = Command.decode(f.body());
    if ("ERROR".equals(c.name())) {
      throw new ZmtpRefusedException(peer, c.reason());
    }
    if (!"READY".equals(c.name())) {
      throw new ZmtpException(peer + " answered the handshake with " + c.name(), false);
    }
    String type = c.properties().get("Socket-Type");
    if (type != null && !"ROUTER".equals(type)) {
      throw new ZmtpException(peer + " is a " + type + " socket, not a ROUTER", true);
    }
  }

  /** Queues one multipart message for the writer thread ({@link #writeQueued}). */
  void enqueue(List<ByteBuffer> frames) {
    outbox.add(frames);
  }

  /** The writer thread's loop: writes queued messages in order until the connection closes. */
  void writeQueued() throws IOException {
    while (ch.isOpen()) {
      List<ByteBuffer> frames;
      try {
        frames = outbox.poll(1, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        throw new IOException("writer interrupted", e);
      }
      if (frames != null) {
        writer.writeMessage(frames);
      }
    }
  }

  /** Blocks for the next message. */
  List<byte[]> receive() throws IOException {
    return reader.readMessage();
  }

  @Override
  public void close() {
    closeQuietly(ch);
  }

  private static void closeQuietly(SocketChannel ch) {
    if (ch != null) {
      try {
        ch.close();
      } catch (IOException ignored) {
        // closing anyway
      }
    }
  }
}
