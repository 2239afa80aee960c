package graphsync.e2e;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;

import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.BoltConnectorInternalSettings;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.connectors.HttpsConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.graphdb.Result;
import org.neo4j.graphdb.Transaction;

/**
 * Starts an embedded Neo4j Community DBMS with only the Bolt connector, on
 * loopback, without TLS or authentication: graphsync's local stack for tests
 * and the demo. It is not a production server.
 *
 * <p>Usage: {@code Neo4jLauncher <home-dir> <bolt-port> [page-cache]}. Data goes
 * to {@code <home>/data}, logs to {@code <home>/logs}. When Bolt is listening
 * the launcher writes {@code <home>/ready} (holding the Bolt URI) and prints
 * {@code graphsync-neo4j ready bolt://...}. SIGTERM shuts the DBMS down cleanly
 * through a shutdown hook, removing the marker first.
 */
public final class Neo4jLauncher {
    private Neo4jLauncher() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: Neo4jLauncher <home-dir> <bolt-port> [page-cache, default 128m]");
            System.exit(2);
        }
        Path home = Path.of(args[0]).toAbsolutePath();
        int boltPort = Integer.parseInt(args[1]);
        String pageCache = args.length > 2 ? args[2] : "128m";
        Path readyMarker = home.resolve("ready");
        Files.deleteIfExists(readyMarker);
        Files.createDirectories(home.resolve("data"));
        Files.createDirectories(home.resolve("logs"));

        DatabaseManagementService dbms = new DatabaseManagementServiceBuilder(home)
                .setConfig(GraphDatabaseSettings.data_directory, home.resolve("data"))
                .setConfig(GraphDatabaseSettings.logs_directory, home.resolve("logs"))
                .setConfig(GraphDatabaseSettings.transaction_logs_root_path, home.resolve("data").resolve("transactions"))
                .setConfig(GraphDatabaseSettings.pagecache_memory, org.neo4j.io.ByteUnit.parse(pageCache))
                .setConfig(GraphDatabaseSettings.auth_enabled, false)
                // Test data is thrown away: keep only the newest transaction
                // log, and send no usage reports (the build machines have no
                // network beyond package registries).
                .setConfig(GraphDatabaseSettings.keep_logical_logs, "false")
                .setConfig(GraphDatabaseSettings.udc_enabled, false)
                .setConfig(BoltConnector.enabled, true)
                .setConfig(BoltConnector.listen_address, new SocketAddress("127.0.0.1", boltPort))
                .setConfig(BoltConnector.advertised_address, new SocketAddress("127.0.0.1", boltPort))
                .setConfig(BoltConnector.encryption_level, BoltConnector.EncryptionLevel.DISABLED)
                // Bolt waits 5s twice on shutdown by default for idle workers;
                // tests stop and start Neo4j, so don't wait for nothing.
                .setConfig(BoltConnectorInternalSettings.thread_pool_shutdown_wait_time, Duration.ofMillis(500))
                .setConfig(BoltConnectorInternalSettings.connection_shutdown_wait_time, Duration.ofMillis(500))
                .setConfig(GraphDatabaseSettings.routing_enabled, false)
                .setConfig(HttpConnector.enabled, false)
                .setConfig(HttpsConnector.enabled, false)
                .build();

        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                Files.deleteIfExists(readyMarker);
            } catch (IOException ignored) {
                // the marker is advisory; shutting the DBMS down matters more
            }
            System.out.println("graphsync-neo4j stopping");
            dbms.shutdown();
            System.out.println("graphsync-neo4j stopped");
            stopped.countDown();
        }, "graphsync-neo4j-shutdown"));

        // Warm the default database so the first Bolt query does not pay for it.
        GraphDatabaseService db = dbms.database(GraphDatabaseSettings.DEFAULT_DATABASE_NAME);
        try (Transaction tx = db.beginTx(); Result result = tx.execute("RETURN 1 AS one")) {
            result.resultAsString();
            tx.commit();
        }

        String boltUri = "bolt://127.0.0.1:" + boltPort;
        Path tmp = home.resolve("ready.tmp");
        Files.writeString(tmp, boltUri + "\n", StandardCharsets.UTF_8);
        Files.move(tmp, readyMarker, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        System.out.println("graphsync-neo4j ready " + boltUri + " (pid " + ProcessHandle.current().pid() + ")");
        System.out.flush();

        stopped.await();
    }
}
