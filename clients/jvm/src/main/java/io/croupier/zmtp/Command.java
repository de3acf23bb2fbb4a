package io.croupier.zmtp;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A ZMTP command frame's body: a 1-byte name length, the name, then the command's data (RFC 23):
 * READY carries properties (1-byte name length, name, 4-byte big-endian value length, value),
 * ERROR a 1-byte reason length and the reason.
 */
record Command(String name, byte[] data) {

  /** READY with {@code Socket-Type} set to {@code socketType}. */
  static Command ready(String socketType) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    byte[] key = "Socket-Type".getBytes(StandardCharsets.US_ASCII);
    byte[] value = socketType.getBytes(StandardCharsets.US_ASCII);
    out.write(key.length);
    out.writeBytes(key);
    out.write(0);
    out.write(0);
    out.write(0);
    out.write(value.length);
    out.writeBytes(value);
    return new Command("READY", out.toByteArray());
  }

  /** The frame body: name length, name, data. */
  byte[] encode() {
    byte[] n = name.getBytes(StandardCharsets.US_ASCII);
    byte[] out = new byte[1 + n.length + data.length];
    out[0] = (byte) n.length;
    System.arraycopy(n, 0, out, 1, n.length);
    System.arraycopy(data, 0, out, 1 + n.length, data.length);
    return out;
  }

  /** Parses a command frame's body. */
  static Command decode(byte[] body) throws ZmtpException {
    if (body.length < 1 || body.length < 1 + (body[0] & 0xff)) {
      throw new ZmtpException("malformed ZMTP command frame", false);
    }
    int n = body[0] & 0xff;
    String name = new String(body, 1, n, StandardCharsets.US_ASCII);
    byte[] data = new byte[body.length - 1 - n];
    System.arraycopy(body, 1 + n, data, 0, data.length);
    return new Command(name, data);
  }

  /** READY's properties. */
  Map<String, String> properties() throws ZmtpException {
    Map<String, String> props = new LinkedHashMap<>();
    int i = 0;
    while (i < data.length) {
      int kn = data[i] & 0xff;
      if (i + 1 + kn + 4 > data.length) {
        throw new ZmtpException("malformed READY properties", false);
      }
      String key = new String(data, i + 1, kn, StandardCharsets.US_ASCII);
      int at = i + 1 + kn;
      long vn = ((data[at] & 0xffL) << 24) | ((data[at + 1] & 0xff) << 16) | ((data[at + 2] & 0xff) << 8) | (data[at + 3] & 0xff);
      if (at + 4 + vn > data.length) {
        throw new ZmtpException("malformed READY property " + key, false);
      }
      props.put(key, new String(data, at + 4, (int) vn, StandardCharsets.ISO_8859_1));
      i = at + 4 + (int) vn;
    }
    return props;
  }

  /** ERROR's reason. */
  String reason() {
    if (data.length == 0) {
      return "";
    }
    int n = Math.min(data[0] & 0xff, data.length - 1);
    return new String(data, 1, n, StandardCharsets.US_ASCII);
  }
}
