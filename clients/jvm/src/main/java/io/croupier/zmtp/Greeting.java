package io.croupier.zmtp;

import java.nio.charset.StandardCharsets;

/**
 * The 64-byte ZMTP 3.0 greeting (RFC 23): signature {@code ff 00*8 7f}, version 3.0, the
 * mechanism name padded to 20 bytes, as-server, 31 bytes of filler.
 */
final class Greeting {
  static final int SIZE = 64;

  private Greeting() {}

  /** Our greeting: ZMTP 3.0, mechanism NULL, as-server 0. */
  static byte[] client() {
    byte[] g = new byte[SIZE];
    g[0] = (byte) 0xff;
    g[9] = 0x7f;
    g[10] = 3;
    g[11] = 0;
    byte[] mech = "NULL".getBytes(StandardCharsets.US_ASCII);
    System.arraycopy(mech, 0, g, 12, mech.length);
    return g;
  }

  /**
   * Checks a server's greeting: a ZMTP 3.x peer that offers the NULL mechanism.
   *
   * @throws ZmtpException (permanent) for another protocol, version or mechanism
   */
  static void check(byte[] g, String peer) throws ZmtpException {
    checkSignature(g, peer);
    String mech = mechanism(g);
    if ("CURVE".equals(mech)) {
      throw new ZmtpException(
          peer
              + " requires the CURVE mechanism: the cluster runs with --curve, and the JVM client"
              + " speaks only NULL (plaintext). Use a cluster without --curve for Spark.",
          true);
    }
    if (!"NULL".equals(mech)) {
      throw new ZmtpException(peer + " requires the " + mech + " mechanism; this client has NULL only", true);
    }
  }

  /**
   * Checks the first 11 bytes of a server's greeting: the signature and a major version of 3 or
   * more.
   */
  static void checkSignature(byte[] g, String peer) throws ZmtpException {
    if ((g[0] & 0xff) != 0xff || g[9] != 0x7f) {
      throw new ZmtpException(peer + " is not a ZeroMQ (ZMTP) server: bad greeting signature", true);
    }
    if (g[10] < 3) {
      throw new ZmtpException(peer + " speaks ZMTP " + g[10] + ".x; Croupier servers speak 3.0", true);
    }
  }

  /** The mechanism name in a greeting, without its padding. */
  static String mechanism(byte[] g) {
    int end = 12;
    while (end < 32 && g[end] != 0) {
      end++;
    }
    return new String(g, 12, end - 12, StandardCharsets.US_ASCII);
  }
}
