package io.croupier.client;

import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;

/**
 * The server cannot be spoken to by this client, and retrying will not change that: it requires
 * the CURVE mechanism (a {@code --curve} cluster), speaks another protocol, or a message is over
 * its frame limit. Raised at once, never retried.
 */
public final class IncompatibleServerException extends CroupierException {
  private static final long serialVersionUID = 1L;

  /** The reason, as the ZMTP layer gave it. */
  public IncompatibleServerException(String message, Throwable cause) {
    super(ErrorCode.UNAVAILABLE, message, cause);
  }
}
