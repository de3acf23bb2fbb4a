package io.croupier.proto;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.apache.commons.codec.digest.Blake3;

/**
 * The 48-byte auth frame (PROTOCOL §2.1): scheme, 7 zero bytes, u64 LE nonce, then the MAC =
 * keyed BLAKE3 over header ‖ auth[0:16] ‖ u32 LE body length ‖ body ‖ first payload (if any).
 */
public final class AuthFrame {
  /** The frame's size. */
  public static final int SIZE = 48;
  /** An app's signature: the app key. */
  public static final int SCHEME_APP = 2;

  private AuthFrame() {}

  /**
   * The auth frame of a request.
   *
   * @param key the scheme's 32-byte key
   * @param header the 20-byte header, AUTH flag set
   * @param body the body frame
   * @param firstPayload the first payload frame, or null when there is none
   */
  public static byte[] sign(int scheme, long nonce, byte[] key, byte[] header, byte[] body, ByteBuffer firstPayload) {
    ByteBuffer frame = ByteBuffer.allocate(SIZE).order(ByteOrder.LITTLE_ENDIAN);
    frame.put((byte) scheme).put(new byte[7]).putLong(nonce);
    byte[] prefix = new byte[16];
    frame.get(0, prefix);
    byte[] len = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(body.length).array();
    Blake3 mac = Blake3.initKeyedHash(key).update(header).update(prefix).update(len).update(body);
    if (firstPayload != null) {
      update(mac, firstPayload);
    }
    frame.put(16, mac.doFinalize(32));
    return frame.array();
  }

  static void update(Blake3 h, ByteBuffer data) {
    ByteBuffer d = data.duplicate();
    if (d.hasArray()) {
      h.update(d.array(), d.arrayOffset() + d.position(), d.remaining());
    } else {
      byte[] copy = new byte[d.remaining()];
      d.get(copy);
      h.update(copy);
    }
  }
}
