package io.croupier.proto;

import java.util.Base64;
import java.util.BitSet;

/**
 * MAPPER_END's partition bitmap (PROTOCOL §4): {@code ceil(n / 8)} bytes, partition p is bit
 * {@code p % 8} (least significant first) of byte {@code p / 8}, in padded standard base64.
 */
public final class PartitionBitmap {
  private PartitionBitmap() {}

  /** The base64 text of the partitions set in {@code touched}, out of {@code numPartitions}. */
  public static String encode(BitSet touched, int numPartitions) {
    byte[] bytes = new byte[(numPartitions + 7) / 8];
    for (int p = touched.nextSetBit(0); p >= 0; p = touched.nextSetBit(p + 1)) {
      bytes[p / 8] |= (byte) (1 << (p % 8));
    }
    return Base64.getEncoder().encodeToString(bytes);
  }
}
