package io.croupier.proto;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * A request's frames (PROTOCOL §1, §2): header, JSON body, the auth frame when signed, payloads.
 * A request is signed with scheme 2 (the app key) when a key is given and its type is not open.
 */
public final class Frames {
  private Frames() {}

  /**
   * The frames of one request.
   *
   * @param appKey the app key, or null (unsigned: open messages, or a cluster without a secret)
   */
  public static List<ByteBuffer> request(int msgType, long requestId, byte[] body, List<ByteBuffer> payloads, byte[] appKey) {
    boolean signed = appKey != null && !MsgType.open(msgType);
    byte[] header = Header.request(msgType, requestId, signed).encode();
    List<ByteBuffer> frames = new ArrayList<>(3 + payloads.size());
    frames.add(ByteBuffer.wrap(header));
    frames.add(ByteBuffer.wrap(body));
    if (signed) {
      ByteBuffer first = payloads.isEmpty() ? null : payloads.get(0);
      frames.add(ByteBuffer.wrap(AuthFrame.sign(AuthFrame.SCHEME_APP, Nonces.next(), appKey, header, body, first)));
    }
    frames.addAll(payloads);
    return frames;
  }
}
