package io.croupier.test;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.croupier.proto.AuthFrame;
import io.croupier.proto.BatchHeader;
import io.croupier.proto.Blake3s;
import io.croupier.proto.Handles;
import io.croupier.proto.Header;
import io.croupier.proto.MsgType;
import io.croupier.proto.PartitionBitmap;
import io.croupier.proto.WinnerRuns;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.PublicKey;
import java.security.spec.NamedParameterSpec;
import java.security.spec.XECPrivateKeySpec;
import java.security.spec.XECPublicKeySpec;
import java.util.BitSet;
import java.util.HexFormat;
import javax.crypto.KeyAgreement;

/**
 * Checks every test vector of PROTOCOL.md with the client's codec. Prints one line {@code
 * vector <name> <value>} per vector (pytest checks that each value is in PROTOCOL.md) and exits 1
 * at the first mismatch.
 */
public final class ProtocolVectors {
  private static final HexFormat HEX = HexFormat.of();

  private ProtocolVectors() {}

  public static void main(String[] args) throws Exception {
    Blake3s.requireAvailable();
    header();
    keys();
    auth();
    curve();
    batches();
    bitmap();
    handles();
    winnerRuns();
    System.out.println("ok");
  }

  private static void check(String name, String got, String want) {
    System.out.println("vector " + name + " " + want);
    if (!got.equals(want)) {
      System.out.println("MISMATCH " + name + ": got " + got + ", want " + want);
      System.exit(1);
    }
  }

  private static String spaced(byte[] b) {
    return HEX.formatHex(b).replaceAll("(..)(?!$)", "$1 ");
  }

  private static void header() {
    byte[] h = Header.request(MsgType.STATUS, 1, false).encode();
    check("status-header", spaced(h), "43 52 50 52 01 00 28 00 01 00 00 00 00 00 00 00 00 00 00 00");
  }

  static byte[] secret() {
    byte[] s = new byte[32];
    for (int i = 0; i < 32; i++) {
      s[i] = (byte) i;
    }
    return s;
  }

  private static void keys() {
    byte[] member = Blake3s.deriveKey("croupier 2026-12-01 member request key v1", secret());
    check("member-key", HEX.formatHex(member), "4db1898ce0ff62db39dce1509bca0acea0429c57d03aa26118508800078b8a40");
    byte[] root = Blake3s.deriveKey("croupier 2026-12-01 app key root v1", secret());
    byte[] tagged = Blake3s.hash(root, 32, "app-1/0123456789abcdef".getBytes(StandardCharsets.UTF_8));
    check("app-key", HEX.formatHex(tagged), "40396749b8fd8ba792e33153dbae85056028e4ddd7be1f9690ebb24ebc9209ac");
    byte[] untagged = Blake3s.hash(root, 32, "app-1".getBytes(StandardCharsets.UTF_8));
    check("app-key-untagged", HEX.formatHex(untagged), "6cb815e17a5ff22b88e33b44cd7ffce12c2ff64454257cf0512c7203f26a3bf4");
  }

  private static void auth() {
    byte[] key = HEX.parseHex("6cb815e17a5ff22b88e33b44cd7ffce12c2ff64454257cf0512c7203f26a3bf4");
    byte[] header = Header.request(MsgType.GET_SHUFFLE, 7, true).encode();
    check("get-shuffle-header", spaced(header), "43 52 50 52 01 00 24 00 07 00 00 00 00 00 00 00 00 00 01 00");
    byte[] body = "{\"app_id\":\"app-1\",\"shuffle_id\":0}".getBytes(StandardCharsets.UTF_8);
    check("get-shuffle-body-length", Integer.toString(body.length), "33");
    byte[] frame = AuthFrame.sign(AuthFrame.SCHEME_APP, 1_764_547_200_000_000L, key, header, body, null);
    byte[] prefix = new byte[16];
    System.arraycopy(frame, 0, prefix, 0, 16);
    check("auth-prefix", spaced(prefix), "02 00 00 00 00 00 00 00 00 a0 0b a9 d8 44 06 00");
    byte[] mac = new byte[32];
    System.arraycopy(frame, 16, mac, 0, 32);
    check("get-shuffle-mac", HEX.formatHex(mac), "32f85f97936f2a7db7a19a04c675d37c3aab5db60f0458d2617676d866d66215");
  }

  private static void curve() throws Exception {
    byte[] sk = Blake3s.deriveKey("croupier 2026-12-01 curve server secret v1", secret());
    check("curve-secret-hex", HEX.formatHex(sk), "c46d4bfd4e2785ed42a60e197b5cf87cafd02c22fc2d015ce874f2f6635573f1");
    check("curve-secret-z85", Z85.encode(sk), "-befCpa7+.lz+kgDTct[UH1*A@4d}O>YDy?v]WQu");
    check("curve-public-z85", Z85.encode(x25519Base(sk)), "4ag8(OIPl<wk#]lHnxh}j9a9dpg@}7{Q5r=^YEX8");
  }

  /** crypto_scalarmult_base: X25519 of the secret with the base point u = 9, through the JDK. */
  private static byte[] x25519Base(byte[] sk) throws Exception {
    KeyFactory kf = KeyFactory.getInstance("XDH");
    PrivateKey priv = kf.generatePrivate(new XECPrivateKeySpec(NamedParameterSpec.X25519, sk));
    PublicKey base = kf.generatePublic(new XECPublicKeySpec(NamedParameterSpec.X25519, BigInteger.valueOf(9)));
    KeyAgreement ka = KeyAgreement.getInstance("XDH");
    ka.init(priv);
    ka.doPhase(base, true);
    return ka.generateSecret();
  }

  private static void batches() {
    byte[] key = new byte[32];
    for (int i = 0; i < 32; i++) {
      key[i] = (byte) i;
    }
    byte[] hello = "hello".getBytes(StandardCharsets.US_ASCII);
    check("batch-prefix", spaced(BatchHeader.prefix(1, 0, 0, 5, 0)).replace(" ", ""), "0100000000000000000000000500000000000000");
    BatchHeader data = BatchHeader.data(key, 1, 0, 0, hello, 0, hello.length);
    check("batch-digest", HEX.formatHex(data.digest()), "ef8d8339b775fd5d9a5d70f0a8fe9159");
    BatchHeader seal = BatchHeader.sealOf(key, 1, 0, 2);
    check("seal-prefix", spaced(BatchHeader.prefix(1, 0, 2, 0, 1)).replace(" ", ""), "0100000000000000020000000000000001000000");
    check("seal-digest", HEX.formatHex(seal.digest()), "59eef1f9594c6c279fd7b194f44c82da");
    check("seal-digest-unkeyed", HEX.formatHex(BatchHeader.sealOf(null, 1, 0, 2).digest()), "25976ed627a17f4099ad6fdee13d5918");
    ByteBuffer b = ByteBuffer.allocate(36);
    data.writeTo(b);
    b.flip();
    if (!BatchHeader.read(b).verify(key, hello, 0)) {
      check("batch-verify", "false", "true");
    }
  }

  private static void bitmap() {
    BitSet set = new BitSet();
    set.set(0);
    set.set(9);
    check("bitmap", PartitionBitmap.encode(set, 10), "AQI=");
  }

  private static void handles() {
    byte[] key = HEX.parseHex("40396749b8fd8ba792e33153dbae85056028e4ddd7be1f9690ebb24ebc9209ac");
    check("app-handle", Handles.app("app-1", key), "croupier-app-v1:app-1:40396749b8fd8ba792e33153dbae85056028e4ddd7be1f9690ebb24ebc9209ac");
    Handles.Parsed p = Handles.parseShuffle("croupier-shuffle-v1:etl-3fa2:0:");
    String got = p.appId() + "/" + p.shuffleId() + "/" + (p.key() == null ? "nokey" : "key");
    check("shuffle-handle", got.equals("etl-3fa2/0/nokey") ? "croupier-shuffle-v1:etl-3fa2:0:" : got, "croupier-shuffle-v1:etl-3fa2:0:");
    check("shuffle-handle-format", Handles.shuffle("etl-3fa2", 0, null), "croupier-shuffle-v1:etl-3fa2:0:");
  }

  private static void winnerRuns() throws Exception {
    WinnerRuns runs = WinnerRuns.parse(new ObjectMapper().readTree("[[0,2,0],[2,3,1],[3,5,0]]"));
    StringBuilder winners = new StringBuilder();
    for (int m = 0; m < 6; m++) {
      winners.append(m == 0 ? "" : ", ").append(runs.winner(m));
    }
    check("winner-runs", winners.toString(), "0, 0, 1, 0, 0, -1");
  }
}
