package io.croupier.client;

import java.util.Iterator;

/**
 * The batches of a {@link Shuffle#reader} range, each exactly once, in no guaranteed order.
 * {@code next()} may throw {@link DataLostException} or another {@link
 * io.croupier.proto.CroupierException}; {@code close()} releases what the reader holds.
 */
public interface BatchReader extends Iterator<Batch>, AutoCloseable {
  @Override
  void close();
}
