package io.croupier.proto;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The 20-byte header frame of every message (PROTOCOL §2), little-endian: magic {@code CRPR},
 * version 1, kind (0 request, 1 reply), msg_type u16, request_id u64, status u16, flags u16.
 *
 * @param kind {@link #REQUEST} or {@link #REPLY}
 * @param msgType the message type (§4, §5.2)
 * @param requestId the client's id of the request, never 0
 * @param status 0, or an error status (§3)
 * @param flags bit 0 = AUTH in a request
 */
public record Header(int kind, int msgType, long requestId, int status, int flags) {
  /** The size of the frame. */
  public static final int SIZE = 20;
  /** Kind of a request. */
  public static final int REQUEST = 0;
  /** Kind of a reply. */
  public static final int REPLY = 1;
  /** The AUTH flag: frame 2 is the auth frame (§2.1). */
  public static final int AUTH = 1;
  private static final int MAGIC = 0x52505243; // "CRPR" read little-endian

  /** A request header. */
  public static Header request(int msgType, long requestId, boolean signed) {
    return new Header(REQUEST, msgType, requestId, 0, signed ? AUTH : 0);
  }

  /** The 20 bytes. */
  public byte[] encode() {
    ByteBuffer b = ByteBuffer.allocate(SIZE).order(ByteOrder.LITTLE_ENDIAN);
    b.putInt(MAGIC).put((byte) 1).put((byte) kind).putShort((short) msgType).putLong(requestId);
    b.putShort((short) status).putShort((short) flags);
    return b.array();
  }

  /**
   * Parses a header frame.
   *
   * @throws CroupierException BAD_REQUEST for another size, magic or version
   */
  public static Header decode(byte[] frame) {
    if (frame.length != SIZE) {
      throw new CroupierException(ErrorCode.BAD_REQUEST, "header frame of " + frame.length + " bytes");
    }
    ByteBuffer b = ByteBuffer.wrap(frame).order(ByteOrder.LITTLE_ENDIAN);
    if (b.getInt() != MAGIC || b.get() != 1) {
      throw new CroupierException(ErrorCode.BAD_REQUEST, "header frame without the CRPR magic or version 1");
    }
    int kind = b.get() & 0xff;
    int type = b.getShort() & 0xffff;
    long id = b.getLong();
    int status = b.getShort() & 0xffff;
    int flags = b.getShort() & 0xffff;
    return new Header(kind, type, id, status, flags);
  }
}
