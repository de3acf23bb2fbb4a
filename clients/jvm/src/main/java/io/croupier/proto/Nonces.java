package io.croupier.proto;

import java.time.Instant;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The auth frame's nonce (PROTOCOL §2.1): the clock in microseconds since the Unix epoch,
 * strictly increasing in the whole process ({@code max(now, last + 1)}), shared by every thread.
 */
public final class Nonces {
  private static final AtomicLong LAST = new AtomicLong();

  private Nonces() {}

  /** The next nonce of this process. */
  public static long next() {
    Instant now = Instant.now();
    long us = now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    return LAST.accumulateAndGet(us, (last, clock) -> Math.max(clock, last + 1));
  }
}
