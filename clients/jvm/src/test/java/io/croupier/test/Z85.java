package io.croupier.test;

/** Z85 (ZeroMQ RFC 32) encoding, for the CURVE key vectors. */
final class Z85 {
  private static final String ALPHABET =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

  private Z85() {}

  static String encode(byte[] data) {
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < data.length; i += 4) {
      long v = 0;
      for (int j = 0; j < 4; j++) {
        v = v * 256 + (data[i + j] & 0xff);
      }
      char[] chunk = new char[5];
      for (int j = 4; j >= 0; j--) {
        chunk[j] = ALPHABET.charAt((int) (v % 85));
        v /= 85;
      }
      out.append(chunk);
    }
    return out.toString();
  }
}
