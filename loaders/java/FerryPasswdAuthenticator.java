package ferry.sql;

import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * HiveServer2's CUSTOM authentication for `ferry sql serve`: each login (user, password) is asked of the
 * verifier `ferry sql serve` runs beside the server, which checks it against the cluster's SCRAM users in
 * ZooKeeper with ferry's own SCRAM code. The verifier listens on a Unix socket in the server's private
 * temporary directory, named by the FERRY_SQL_AUTH_SOCKET environment variable (no secret on any command
 * line). Request: user and password as 4-byte big-endian lengths + UTF-8; answer: one byte, 1 = accepted.
 * Any failure to ask (verifier gone, short answer) refuses the login.
 */
public final class FerryPasswdAuthenticator implements PasswdAuthenticationProvider {
    private static final int MAX_FIELD = 4096;

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        String socket = System.getenv("FERRY_SQL_AUTH_SOCKET");
        if (socket == null || socket.isEmpty()) {
            throw new AuthenticationException("ferry: no credential verifier configured");
        }
        if (user == null || password == null) {
            throw new AuthenticationException("ferry: user name and password required");
        }
        byte[] u = user.getBytes(StandardCharsets.UTF_8);
        byte[] p = password.getBytes(StandardCharsets.UTF_8);
        if (u.length > MAX_FIELD || p.length > MAX_FIELD) {
            throw new AuthenticationException("ferry: user name or password too long");
        }
        ByteBuffer request = ByteBuffer.allocate(8 + u.length + p.length);
        request.putInt(u.length).put(u).putInt(p.length).put(p).flip();
        ByteBuffer answer = ByteBuffer.allocate(1);
        try (SocketChannel channel = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            channel.connect(UnixDomainSocketAddress.of(socket));
            while (request.hasRemaining()) {
                channel.write(request);
            }
            while (answer.hasRemaining()) {
                if (channel.read(answer) < 0) {
                    break;
                }
            }
        } catch (IOException e) {
            throw new AuthenticationException("ferry: credential verifier unreachable: " + e.getMessage());
        }
        if (answer.position() != 1 || answer.get(0) != 1) {
            throw new AuthenticationException("Error validating the login of user " + user);
        }
    }
}
