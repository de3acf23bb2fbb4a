package io.croupier.zmtp;

import java.net.InetSocketAddress;

/**
 * A parsed {@code tcp://host:port} URL (IPv6 hosts in brackets).
 *
 * @param host the host name or literal
 * @param port the TCP port
 */
public record Endpoint(String host, int port) {
  /**
   * Parses {@code url}.
   *
   * @throws IllegalArgumentException for anything but {@code tcp://host:port}
   */
  public static Endpoint parse(String url) {
    if (url == null || !url.startsWith("tcp://")) {
      throw new IllegalArgumentException("not a tcp://host:port URL: " + url);
    }
    String rest = url.substring(6);
    int colon = rest.lastIndexOf(':');
    if (colon <= 0) {
      throw new IllegalArgumentException("no port in " + url);
    }
    String host = rest.substring(0, colon);
    if (host.startsWith("[") && host.endsWith("]")) {
      host = host.substring(1, host.length() - 1);
    }
    int port;
    try {
      port = Integer.parseInt(rest.substring(colon + 1));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("bad port in " + url);
    }
    if (port < 1 || port > 65535 || host.isEmpty()) {
      throw new IllegalArgumentException("bad host or port in " + url);
    }
    return new Endpoint(host, port);
  }

  /** The socket address (resolved now). */
  public InetSocketAddress address() {
    return new InetSocketAddress(host, port);
  }

  @Override
  public String toString() {
    return "tcp://" + (host.contains(":") ? "[" + host + "]" : host) + ":" + port;
  }
}
