package io.croupier.zmtp;

import java.io.IOException;

/**
 * A ZMTP connection failed: it could not be opened, its handshake failed, or it broke. {@link
 * #permanent()} is true when retrying cannot help (the server wants another security mechanism,
 * for instance a {@code --curve} cluster).
 */
public class ZmtpException extends IOException {
  private static final long serialVersionUID = 1L;
  private final boolean permanent;

  /** A failure; {@code permanent} when a retry cannot succeed. */
  public ZmtpException(String message, boolean permanent) {
    super(message);
    this.permanent = permanent;
  }

  /** A failure caused by {@code cause}. */
  public ZmtpException(String message, Throwable cause) {
    super(message, cause);
    this.permanent = false;
  }

  /** Whether a retry cannot succeed. */
  public boolean permanent() {
    return permanent;
  }
}
