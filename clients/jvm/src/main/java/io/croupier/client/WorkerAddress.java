package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * A worker address from a master reply (PROTOCOL §4): its id, host, ports, incarnation and
 * status. {@code known} is false for an id the reply did not resolve (a worker removed since).
 */
record WorkerAddress(String workerId, String host, int pushPort, int fetchPort, int replicatePort,
    String incarnation, String status, boolean known) {

  /** Parses an address object. */
  static WorkerAddress parse(JsonNode a) {
    return new WorkerAddress(a.path("worker_id").asText(), a.path("host").asText(), a.path("push_port").asInt(),
        a.path("fetch_port").asInt(), a.path("replicate_port").asInt(), a.path("incarnation").asText(""),
        a.path("status").asText("active"), true);
  }

  /** An id the reply did not resolve. */
  static WorkerAddress unknown(String workerId) {
    return new WorkerAddress(workerId, "", 0, 0, 0, "", "lost", false);
  }

  private String url(int port) {
    return "tcp://" + (host.contains(":") ? "[" + host + "]" : host) + ":" + port;
  }

  String pushUrl() {
    return url(pushPort);
  }

  String fetchUrl() {
    return url(fetchPort);
  }

  String replicateUrl() {
    return url(replicatePort);
  }

  boolean lost() {
    return "lost".equals(status);
  }
}
