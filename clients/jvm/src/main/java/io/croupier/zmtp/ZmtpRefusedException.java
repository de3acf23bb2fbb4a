package io.croupier.zmtp;

/**
 * The server refused the connection during its handshake with a ZMTP {@code ERROR} command: a ZAP
 * refusal, for instance {@code 400} when its connection budget is exhausted (PROTOCOL §1). The
 * socket backs off and tries again later.
 */
public final class ZmtpRefusedException extends ZmtpException {
  private static final long serialVersionUID = 1L;
  private final String reason;

  ZmtpRefusedException(String peer, String reason) {
    super(peer + " refused the connection (ZMTP ERROR \"" + reason + "\""
        + ("400".equals(reason) ? ": its connection budget is exhausted" : "") + ")", false);
    this.reason = reason;
  }

  /** The ERROR command's reason, e.g. {@code "400"}. */
  public String reason() {
    return reason;
  }
}
