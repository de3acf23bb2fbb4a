package io.croupier.proto;

import java.util.HexFormat;

/**
 * App and shuffle handles (PROTOCOL §4.3): {@code croupier-app-v1:<app_id>:<key>} and {@code
 * croupier-shuffle-v1:<app_id>:<shuffle_id>:<key>}, the key as 64 lowercase hex digits or empty.
 * They carry the app key: credentials. Error messages never repeat the key.
 */
public final class Handles {
  /** A shuffle handle's prefix. */
  public static final String SHUFFLE_PREFIX = "croupier-shuffle-v1";
  /** An app handle's prefix. */
  public static final String APP_PREFIX = "croupier-app-v1";

  private Handles() {}

  /** A parsed handle: the app id, the shuffle id (-1 in an app handle) and the key (or null). */
  public record Parsed(String appId, long shuffleId, byte[] key) {}

  /** An app's handle. */
  public static String app(String appId, byte[] key) {
    return APP_PREFIX + ":" + appId + ":" + hex(key);
  }

  /** A shuffle's handle. */
  public static String shuffle(String appId, long shuffleId, byte[] key) {
    return SHUFFLE_PREFIX + ":" + appId + ":" + shuffleId + ":" + hex(key);
  }

  /** Parses a shuffle handle; BAD_REQUEST when it is not one. */
  public static Parsed parseShuffle(String handle) {
    String[] f = handle == null ? new String[0] : handle.split(":", -1);
    if (f.length != 4 || !SHUFFLE_PREFIX.equals(f[0])) {
      throw bad("not a shuffle handle: expected " + SHUFFLE_PREFIX + ":<app_id>:<shuffle_id>:<key>");
    }
    if (f[1].isEmpty() || f[2].isEmpty() || !f[2].chars().allMatch(c -> c >= '0' && c <= '9') || f[2].length() > 10) {
      throw bad("not a shuffle handle: its app id or shuffle id is malformed");
    }
    return new Parsed(f[1], Long.parseLong(f[2]), key(f[3], "shuffle"));
  }

  /** Parses an app handle; BAD_REQUEST when it is not one. */
  public static Parsed parseApp(String handle) {
    String[] f = handle == null ? new String[0] : handle.split(":", -1);
    if (f.length != 3 || !APP_PREFIX.equals(f[0])) {
      throw bad("not an app handle: expected " + APP_PREFIX + ":<app_id>:<key>");
    }
    if (f[1].isEmpty()) {
      throw bad("not an app handle: its app id is empty");
    }
    return new Parsed(f[1], -1, key(f[2], "app"));
  }

  private static byte[] key(String text, String what) {
    if (text.isEmpty()) {
      return null;
    }
    if (text.length() != 64 || !text.chars().allMatch(c -> (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      throw bad("not a " + what + " handle: its key is not 64 lowercase hex digits");
    }
    return HexFormat.of().parseHex(text);
  }

  private static String hex(byte[] key) {
    return key == null ? "" : HexFormat.of().formatHex(key);
  }

  private static CroupierException bad(String message) {
    return new CroupierException(ErrorCode.BAD_REQUEST, message);
  }
}
