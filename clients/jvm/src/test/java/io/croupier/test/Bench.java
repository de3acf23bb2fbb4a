package io.croupier.test;

import io.croupier.client.App;
import io.croupier.client.Batch;
import io.croupier.client.BatchReader;
import io.croupier.client.CroupierClient;
import io.croupier.client.MapWriter;
import io.croupier.client.Shuffle;
import io.croupier.proto.Blake3s;
import java.util.Random;
import java.util.zip.CRC32;

/**
 * The JVM client's throughput on one machine: 4 maps push opaque batches, one reader reads them
 * all back; every batch is checked (count and CRC32 sum). Also the keyed BLAKE3 rate alone,
 * since every pushed and every kept batch costs one digest.
 */
final class Bench {
  private static final int MAPS = 4;

  private Bench() {}

  static void run(CroupierClient c, int mib, int partitions, int batchKib) {
    App app = c.registerApp(null, "jvm-bench");
    Shuffle sh = app.registerShuffle(MAPS, partitions);
    byte[] block = new byte[batchKib * 1024];
    new Random(7).nextBytes(block);
    long batches = (long) mib * 1024 / batchKib / MAPS;
    long crcSum = 0;
    long t0 = System.nanoTime();
    for (int m = 0; m < MAPS; m++) {
      try (MapWriter w = sh.writer(m, 0)) {
        for (long i = 0; i < batches; i++) {
          block[0] = (byte) i;
          block[1] = (byte) m;
          crcSum += crc(block);
          w.pushBatch((int) (i % partitions), block, 0, block.length);
        }
        w.commit();
      }
    }
    double write = seconds(t0);
    long t1 = System.nanoTime();
    long got = 0;
    long gotSum = 0;
    try (BatchReader r = sh.reader(0, MAPS, 0, partitions)) {
      while (r.hasNext()) {
        Batch b = r.next();
        got++;
        gotSum += crc(b.data());
      }
    }
    double read = seconds(t1);
    long total = batches * MAPS * block.length;
    if (got != batches * MAPS || gotSum != crcSum) {
      throw new IllegalStateException("read " + got + " batches of " + batches * MAPS + ", checksums differ: "
          + (gotSum != crcSum));
    }
    System.out.printf("write %.1f MB/s, read %.1f MB/s, %d MiB in %d batches of %d KiB, blake3 keyed %.1f MB/s%n",
        total / write / 1e6, total / read / 1e6, total >> 20, got, batchKib, blake3Rate(block));
    sh.unregister();
    app.unregister();
    System.out.println("ok");
  }

  private static long crc(byte[] b) {
    CRC32 c = new CRC32();
    c.update(b);
    return c.getValue();
  }

  private static double seconds(long since) {
    return (System.nanoTime() - since) / 1e9;
  }

  private static double blake3Rate(byte[] block) {
    byte[] key = new byte[32];
    long t = System.nanoTime();
    long bytes = 0;
    while (System.nanoTime() - t < 1_000_000_000L) {
      Blake3s.hash(key, 16, block);
      bytes += block.length;
    }
    return bytes / seconds(t) / 1e6;
  }
}
