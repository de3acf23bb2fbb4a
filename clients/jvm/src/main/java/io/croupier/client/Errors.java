package io.croupier.client;

import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.Reply;

/** Error replies as exceptions: {@code DATA_LOST} as {@link DataLostException}, others plain. */
final class Errors {
  private Errors() {}

  /** The exception of an error reply. */
  static CroupierException of(Reply reply) {
    CroupierException e = reply.error();
    if (e.code() == ErrorCode.DATA_LOST) {
      return DataLostException.fromReply(reply.body().path("message").asText(""), e.details());
    }
    return e;
  }
}
