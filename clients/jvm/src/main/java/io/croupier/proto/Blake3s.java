package io.croupier.proto;

import java.nio.charset.StandardCharsets;
import org.apache.commons.codec.digest.Blake3;

/**
 * BLAKE3 through commons-codec's {@code Blake3} (on Spark's class path since 4.0): keyed hashes
 * (MACs, app keys, batch digests), plain hashes, and key derivation (PROTOCOL §2.1, §5.1).
 */
public final class Blake3s {
  private static final String CLASS = "org.apache.commons.codec.digest.Blake3";

  private Blake3s() {}

  /**
   * Checks that commons-codec's {@code Blake3} can be loaded.
   *
   * @throws IllegalStateException naming the jar to add, when it cannot
   */
  public static void requireAvailable() {
    try {
      Class.forName(CLASS, false, Blake3s.class.getClassLoader());
    } catch (ClassNotFoundException | LinkageError e) {
      throw new IllegalStateException("the Croupier client needs " + CLASS + " (commons-codec 1.16 or"
          + " later, which Spark 4 ships in its jars/): an older commons-codec is first on the class"
          + " path, or none is there", e);
    }
  }

  /** A hasher keyed with the 32-byte {@code key}, or a plain one when {@code key} is null. */
  public static Blake3 hasher(byte[] key) {
    return key == null ? Blake3.initHash() : Blake3.initKeyedHash(key);
  }

  /** The first {@code n} bytes of BLAKE3 of {@code parts} (keyed when {@code key} is non-null). */
  public static byte[] hash(byte[] key, int n, byte[]... parts) {
    Blake3 h = hasher(key);
    for (byte[] p : parts) {
      h.update(p);
    }
    return h.doFinalize(n);
  }

  /** BLAKE3's key derivation of {@code material} with {@code context}: 32 bytes. */
  public static byte[] deriveKey(String context, byte[] material) {
    return Blake3.initKeyDerivationFunction(context.getBytes(StandardCharsets.UTF_8))
        .update(material)
        .doFinalize(32);
  }
}
