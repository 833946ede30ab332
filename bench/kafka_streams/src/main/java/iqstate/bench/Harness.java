package iqstate.bench;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.StringJoiner;
import java.util.function.IntSupplier;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyQueryMetadata;
import org.apache.kafka.streams.LagInfo;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.query.KeyQuery;
import org.apache.kafka.streams.query.QueryResult;
import org.apache.kafka.streams.query.RangeQuery;
import org.apache.kafka.streams.query.StateQueryRequest;
import org.apache.kafka.streams.query.StateQueryResult;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The Kafka Streams side of bench/kafka_streams/compare.py.
 *
 * <p>{@code bench}: restore the store from its changelog into a fresh state directory (timed
 * from {@code start()} until the instance is RUNNING and every partition answers the key
 * written last to it), then time key lookups (all partitions, then naming the partition) and
 * 100-key ranges in tight loops after a warm-up; print one JSON line.
 *
 * <p>{@code serve}: one instance of a two-instance group with a standby, driven over stdin
 * ({@code status KEY}, {@code probe KEY PARTITION}, {@code quit}), one JSON line per command.
 *
 * <p>Arguments are {@code --name value} pairs; see {@link #settings}.
 */
public final class Harness {
    private Harness() {}

    /** One key lookup of the workload, with the partition the changelog holds it in. */
    record Lookup(String key, int partition) {}

    /** One range of the workload: 100 consecutive keys of one partition, bounds inclusive. */
    record Range(int partition, String lower, String upper) {}

    /** The workload file: lookups (K), ranges (R) and each partition's last-written key (L). */
    record Workload(List<Lookup> lookups, List<Range> ranges, Map<Integer, String[]> last) {
        static Workload read(Path path) throws IOException {
            List<Lookup> lookups = new ArrayList<>();
            List<Range> ranges = new ArrayList<>();
            Map<Integer, String[]> last = new HashMap<>();
            for (String line : Files.readAllLines(path, StandardCharsets.UTF_8)) {
                String[] f = line.split(" ");
                switch (f[0]) {
                    case "K" -> lookups.add(new Lookup(f[1], Integer.parseInt(f[2])));
                    case "R" -> ranges.add(new Range(Integer.parseInt(f[1]), f[2], f[3]));
                    case "L" -> last.put(Integer.parseInt(f[1]), new String[] {f[2], f[3]});
                    default -> throw new IllegalArgumentException("workload line: " + line);
                }
            }
            return new Workload(lookups, ranges, last);
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            options.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        switch (args[0]) {
            case "bench" -> bench(options);
            case "serve" -> serve(options);
            default -> throw new IllegalArgumentException("mode: bench or serve");
        }
    }

    /** The application's settings: String serdes, caching off, one stream thread. */
    static Properties settings(Map<String, String> options) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, options.get("app-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, options.get("bootstrap"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, options.get("state-dir"));
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0L);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        if (options.containsKey("application-server")) {
            props.put(StreamsConfig.APPLICATION_SERVER_CONFIG, options.get("application-server"));
        }
        if (options.containsKey("standbys")) {
            props.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, options.get("standbys"));
        }
        if (options.containsKey("session-timeout-ms")) {
            props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), options.get("session-timeout-ms"));
        }
        return props;
    }

    /**
     * The topology: the input topic materialized into a RocksDB key-value store named
     * {@code store}, logged to {@code <app-id>-<store>-changelog}.
     *
     * <p>{@code table} (default): {@code builder.table} with {@code Materialized.as(
     * Stores.persistentKeyValueStore(store))}, the DSL idiom; the KTable wraps the plain store
     * in Kafka's timestamp adapter. {@code processor}: a plain {@code KeyValueStore} built with
     * {@code Stores.keyValueStoreBuilder} and filled by a processor, no adapter.
     */
    static Topology topology(String input, String store, String kind) {
        StreamsBuilder builder = new StreamsBuilder();
        if (kind.equals("processor")) {
            builder.addStateStore(Stores.keyValueStoreBuilder(
                    Stores.persistentKeyValueStore(store), Serdes.String(), Serdes.String())
                .withCachingDisabled());
            builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .process(() -> new Putter(store), store);
        } else {
            builder.table(input, Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.<String, String>as(Stores.persistentKeyValueStore(store))
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.String())
                    .withCachingDisabled());
        }
        return builder.build();
    }

    /** Puts each input record into the store (the {@code processor} topology). */
    static final class Putter implements Processor<String, String, Void, Void> {
        private final String storeName;
        private KeyValueStore<String, String> store;

        Putter(String storeName) {
            this.storeName = storeName;
        }

        @Override
        public void init(ProcessorContext<Void, Void> context) {
            store = context.getStateStore(storeName);
        }

        @Override
        public void process(Record<String, String> record) {
            store.put(record.key(), record.value());
        }
    }

    /** When Kafka Streams' own restoration started and ended, and how many records it applied. */
    static final class RestoreSpan implements StateRestoreListener {
        volatile long firstStart;
        volatile long lastEnd;
        volatile long records;

        @Override
        public synchronized void onRestoreStart(
                TopicPartition partition, String store, long startOffset, long endOffset) {
            if (firstStart == 0) {
                firstStart = System.nanoTime();
            }
        }

        @Override
        public synchronized void onBatchRestored(
                TopicPartition partition, String store, long batchEndOffset, long numRestored) {
            records += numRestored;
        }

        @Override
        public synchronized void onRestoreEnd(
                TopicPartition partition, String store, long totalRestored) {
            lastEnd = System.nanoTime();
        }
    }

    static KafkaStreams open(Map<String, String> options) {
        Topology topology = topology(options.get("input"), options.get("store"),
            options.getOrDefault("store-kind", "table"));
        return new KafkaStreams(topology, settings(options));
    }

    static void closeLeaving(KafkaStreams streams) {
        streams.close(CloseOptions.groupMembershipOperation(
            CloseOptions.GroupMembershipOperation.LEAVE_GROUP).withTimeout(Duration.ofSeconds(30)));
    }

    // ---------------------------------------------------------------- queries

    static String keyAll(KafkaStreams streams, String store, String key) {
        StateQueryRequest<String> request =
            StateQueryRequest.inStore(store).withQuery(KeyQuery.<String, String>withKey(key));
        QueryResult<String> only = streams.query(request).getOnlyPartitionResult();
        return only == null ? null : only.getResult();
    }

    static QueryResult<String> keyIn(
            KafkaStreams streams, String store, String key, int partition, boolean active) {
        StateQueryRequest<String> request = StateQueryRequest.inStore(store)
            .withQuery(KeyQuery.<String, String>withKey(key)).withPartitions(Set.of(partition));
        if (active) {
            request = request.requireActive();
        }
        return streams.query(request).getPartitionResults().get(partition);
    }

    static int range(KafkaStreams streams, String store, Range range) {
        StateQueryRequest<KeyValueIterator<String, String>> request = StateQueryRequest
            .inStore(store)
            .withQuery(RangeQuery.<String, String>withRange(range.lower(), range.upper()))
            .withPartitions(Set.of(range.partition()));
        StateQueryResult<KeyValueIterator<String, String>> result = streams.query(request);
        QueryResult<KeyValueIterator<String, String>> answer =
            result.getPartitionResults().get(range.partition());
        if (answer == null || !answer.isSuccess()) {
            throw new IllegalStateException("range failed: " + answer);
        }
        int count = 0;
        try (KeyValueIterator<String, String> rows = answer.getResult()) {
            while (rows.hasNext()) {
                rows.next();
                count++;
            }
        }
        return count;
    }

    // ---------------------------------------------------------------- bench

    static void bench(Map<String, String> options) throws Exception {
        Workload workload = Workload.read(Path.of(options.get("workload")));
        String store = options.get("store");
        int operations = Integer.parseInt(options.get("operations"));
        int warmup = Integer.parseInt(options.get("warmup"));
        int repeats = Integer.parseInt(options.getOrDefault("repeats", "3"));
        KafkaStreams streams = open(options);
        RestoreSpan span = new RestoreSpan();
        streams.setGlobalStateRestoreListener(span);
        try {
            long started = System.nanoTime();
            streams.start();
            while (!restored(streams, store, workload)) {
                Thread.sleep(1);
            }
            double restoreSeconds = (System.nanoTime() - started) / 1e9;
            double toFirstRestore = (span.firstStart - started) / 1e9;
            double listenerSeconds = (span.lastEnd - span.firstStart) / 1e9;
            Map<String, IntSupplier> loops = loops(streams, store, workload, operations);
            Map<String, Integer> warmed = new LinkedHashMap<>();
            for (var entry : loops(streams, store, workload, warmup).entrySet()) {
                warmed.put(entry.getKey(), entry.getValue().getAsInt());
            }
            Map<String, List<Double>> micros = new LinkedHashMap<>();
            Map<String, Integer> counts = new LinkedHashMap<>();
            for (int r = 0; r < repeats; r++) {
                for (var entry : loops.entrySet()) {
                    long t0 = System.nanoTime();
                    int count = entry.getValue().getAsInt();
                    long t1 = System.nanoTime();
                    micros.computeIfAbsent(entry.getKey(), k -> new ArrayList<>())
                        .add((t1 - t0) / 1e3 / iterations(entry.getKey(), operations));
                    counts.put(entry.getKey(), count);
                }
            }
            StringJoiner json = new StringJoiner(", ", "{", "}");
            json.add("\"restore_seconds\": " + restoreSeconds);
            json.add("\"start_to_first_restore_seconds\": " + toFirstRestore);
            json.add("\"restore_listener_seconds\": " + listenerSeconds);
            json.add("\"restored_records\": " + span.records);
            json.add("\"operations\": " + operations);
            json.add("\"warmup\": " + warmup);
            for (var entry : micros.entrySet()) {
                json.add("\"" + entry.getKey() + "_us\": " + entry.getValue());
                json.add("\"" + entry.getKey() + "_found\": " + counts.get(entry.getKey()));
            }
            System.out.println(json);
        } finally {
            closeLeaving(streams);
        }
    }

    /** RUNNING, and every partition's last-written key answers with its value (as active). */
    static boolean restored(KafkaStreams streams, String store, Workload workload) {
        if (streams.state() != KafkaStreams.State.RUNNING) {
            return false;
        }
        for (var entry : workload.last().entrySet()) {
            QueryResult<String> answer =
                keyIn(streams, store, entry.getValue()[0], entry.getKey(), true);
            if (answer == null || !answer.isSuccess()
                    || !entry.getValue()[1].equals(answer.getResult())) {
                return false;
            }
        }
        return true;
    }

    /** How many queries a loop of `operations` runs: ranges run a tenth as many. */
    static int iterations(String loop, int operations) {
        return loop.equals("range100") ? Math.max(1, operations / 10) : operations;
    }

    /** The three timed loops over `operations` items; each returns how many it found. */
    static Map<String, IntSupplier> loops(
            KafkaStreams streams, String store, Workload workload, int operations) {
        List<Lookup> lookups = workload.lookups();
        List<Range> ranges = workload.ranges();
        Map<String, IntSupplier> loops = new LinkedHashMap<>();
        loops.put("key_all", () -> {
            int found = 0;
            for (int i = 0; i < operations; i++) {
                if (keyAll(streams, store, lookups.get(i % lookups.size()).key()) != null) {
                    found++;
                }
            }
            return found;
        });
        loops.put("key_partition", () -> {
            int found = 0;
            for (int i = 0; i < operations; i++) {
                Lookup lookup = lookups.get(i % lookups.size());
                QueryResult<String> answer =
                    keyIn(streams, store, lookup.key(), lookup.partition(), false);
                if (answer != null && answer.isSuccess() && answer.getResult() != null) {
                    found++;
                }
            }
            return found;
        });
        loops.put("range100", () -> {
            int rows = 0;
            int count = iterations("range100", operations);
            for (int i = 0; i < count; i++) {
                rows += range(streams, store, ranges.get(i % ranges.size()));
            }
            return rows;
        });
        return loops;
    }

    // ---------------------------------------------------------------- serve

    static void serve(Map<String, String> options) throws Exception {
        String store = options.get("store");
        KafkaStreams streams = open(options);
        streams.start();
        System.out.println("{\"started\": true}");
        System.out.flush();
        BufferedReader commands =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            String line;
            while ((line = commands.readLine()) != null) {
                String[] f = line.trim().split(" ");
                if (f[0].equals("quit")) {
                    break;
                }
                String answer = switch (f[0]) {
                    case "status" -> status(streams, store, f[1]);
                    case "probe" -> probe(streams, store, f[1], Integer.parseInt(f[2]));
                    default -> "{\"error\": \"unknown command\"}";
                };
                System.out.println(answer);
                System.out.flush();
            }
        } finally {
            closeLeaving(streams);
        }
    }

    /** State, the key's active and standby hosts, and this instance's local lags. */
    static String status(KafkaStreams streams, String store, String key) {
        StringJoiner json = new StringJoiner(", ", "{", "}");
        json.add("\"state\": \"" + streams.state() + "\"");
        if (streams.state() == KafkaStreams.State.RUNNING) {
            KeyQueryMetadata metadata =
                streams.queryMetadataForKey(store, key, Serdes.String().serializer());
            if (metadata != null && metadata != KeyQueryMetadata.NOT_AVAILABLE) {
                json.add("\"active\": \"" + metadata.activeHost().host() + ":"
                    + metadata.activeHost().port() + "\"");
                StringJoiner standbys = new StringJoiner(", ", "[", "]");
                metadata.standbyHosts().forEach(h -> standbys.add("\"" + h.host() + ":" + h.port() + "\""));
                json.add("\"standbys\": " + standbys);
                json.add("\"partition\": " + metadata.partition());
            }
            StringJoiner lags = new StringJoiner(", ", "{", "}");
            Map<Integer, LagInfo> local =
                streams.allLocalStorePartitionLags().getOrDefault(store, Map.of());
            local.forEach((p, lag) -> lags.add("\"" + p + "\": " + lag.offsetLag()));
            json.add("\"lags\": " + lags);
        }
        return json.toString();
    }

    /**
     * Ask for the key as active until it is answered (or 300 s pass); how many asks failed
     * meanwhile.
     */
    static String probe(KafkaStreams streams, String store, String key, int partition)
            throws InterruptedException {
        long started = System.nanoTime();
        long deadline = started + 300_000_000_000L;
        int failures = 0;
        boolean answered = false;
        while (System.nanoTime() < deadline) {
            QueryResult<String> answer;
            try {
                answer = keyIn(streams, store, key, partition, true);
            } catch (RuntimeException e) {
                answer = null;
            }
            if (answer != null && answer.isSuccess() && answer.getResult() != null) {
                answered = true;
                break;
            }
            failures++;
            Thread.sleep(1);
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        return "{\"answered\": " + answered + ", \"failures\": " + failures
            + ", \"seconds\": " + seconds + "}";
    }
}
