package io.croupier.zmtp;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * A ZMTP 3.0 DEALER connected to one server endpoint over {@code java.nio}, with the NULL
 * mechanism. It connects on first use and again after the connection breaks or is refused
 * (backing off from 100 ms to 5 s between failed tries), checks the port's frame limit before
 * sending (a larger frame makes a Croupier server drop the connection), and hands every message
 * received to its {@link Listener} on a daemon reader thread. Messages are written by a daemon
 * writer thread per connection, so an interrupted caller (a killed Spark task) never closes the
 * channel that other threads share. Thread-safe.
 */
public final class DealerSocket implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(DealerSocket.class.getName());
  private static final long MIN_BACKOFF_MS = 100;
  private static final long MAX_BACKOFF_MS = 5000;

  /** Receives what arrives on a socket, on its reader thread. */
  public interface Listener {
    /** One multipart message. */
    void onMessage(List<byte[]> frames);

    /** The connection of generation {@code generation} is gone: its pending replies never come. */
    void onDisconnect(long generation, IOException cause);
  }

  private final Endpoint endpoint;
  private final long maxFrame;
  private final Duration connectTimeout;
  private final Listener listener;
  private Connection conn;
  private long generation;
  private long backoffMs;
  private long retryAtNanos;
  private ZmtpException permanent;
  private boolean closed;

  /**
   * A socket for {@code url} whose frames may be at most {@code maxFrame} bytes (PROTOCOL §1:
   * 1 MiB on master, control and fetch ports, 256 MiB on push and replicate ports).
   */
  public DealerSocket(String url, long maxFrame, Duration connectTimeout, Listener listener) {
    this.endpoint = Endpoint.parse(url);
    this.maxFrame = maxFrame;
    this.connectTimeout = connectTimeout;
    this.listener = listener;
  }

  /** The endpoint's URL. */
  public String url() {
    return endpoint.toString();
  }

  /**
   * Sends one message, connecting first when needed; returns the connection's generation (its
   * {@link Listener#onDisconnect} names it).
   *
   * @throws ZmtpException when the message is over the frame limit (permanent), or the server
   *     cannot be reached or refused the connection
   */
  public long send(List<ByteBuffer> frames) throws ZmtpException {
    for (ByteBuffer f : frames) {
      if (f.remaining() > maxFrame) {
        throw new ZmtpException("a frame of " + f.remaining() + " bytes is over " + url()
            + "'s limit of " + maxFrame + " bytes (the server would drop the connection)", true);
      }
    }
    Connection c;
    long gen;
    synchronized (this) {
      c = connected();
      gen = generation;
    }
    c.enqueue(frames);
    return gen;
  }

  private Connection connected() throws ZmtpException {
    if (closed) {
      throw new ZmtpException("socket to " + url() + " is closed", true);
    }
    if (conn != null) {
      return conn;
    }
    if (permanent != null) {
      throw permanent;
    }
    long wait = retryAtNanos - System.nanoTime();
    if (wait > 0) {
      sleep(wait / 1_000_000 + 1);
    }
    try {
      conn = Connection.open(endpoint.address(), url(), connectTimeout);
    } catch (ZmtpException e) {
      if (e.permanent()) {
        permanent = e;
      }
      backoffMs = Math.min(MAX_BACKOFF_MS, Math.max(MIN_BACKOFF_MS, backoffMs * 2));
      retryAtNanos = System.nanoTime() + backoffMs * 1_000_000;
      throw e;
    }
    backoffMs = 0;
    generation++;
    startReader(conn, generation);
    return conn;
  }

  private void startReader(Connection c, long gen) {
    Thread t = new Thread(() -> readLoop(c, gen), "croupier-zmtp-in-" + url());
    t.setDaemon(true);
    t.start();
    Thread w = new Thread(() -> writeLoop(c, gen), "croupier-zmtp-out-" + url());
    w.setDaemon(true);
    w.start();
  }

  private void writeLoop(Connection c, long gen) {
    try {
      c.writeQueued();
    } catch (IOException e) {
      drop(c, gen, e);
    }
  }

  private void readLoop(Connection c, long gen) {
    try {
      while (true) {
        listener.onMessage(c.receive());
      }
    } catch (IOException e) {
      drop(c, gen, e);
    } catch (RuntimeException e) {
      LOG.log(Level.SEVERE, "croupier: the listener of " + url() + " failed", e);
      drop(c, gen, new IOException(e));
    }
  }

  private void drop(Connection c, long gen, IOException cause) {
    boolean mine;
    synchronized (this) {
      mine = conn == c;
      if (mine) {
        conn = null;
      }
    }
    c.close();
    if (mine) {
      if (!closed) {
        LOG.fine("croupier: connection to " + url() + " lost: " + cause);
      }
      listener.onDisconnect(gen, cause);
    }
  }

  /** Closes the current connection (the next send opens a new one). */
  public void reconnect() {
    Connection c;
    long gen;
    synchronized (this) {
      c = conn;
      gen = generation;
    }
    if (c != null) {
      drop(c, gen, new IOException("reconnect requested"));
    }
  }

  @Override
  public void close() {
    Connection c;
    synchronized (this) {
      closed = true;
      c = conn;
    }
    if (c != null) {
      drop(c, generation, new IOException("socket closed"));
    }
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
