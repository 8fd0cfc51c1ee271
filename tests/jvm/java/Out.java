import java.util.Collection;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;

/**
 * The programs' only output: one JSON object per line on stdout, read by the Python test.
 * Synchronized, so the lines of all threads form one order consistent with what each thread
 * did (a member prints "revoke" inside its listener, before the coordinator can hand the
 * partition to another member, whose "assign" therefore prints later).
 */
final class Out {
    private Out() {}

    private static final long START_NS = System.nanoTime();

    /** Prints {"e": event, "t": ms since the program started, k1: v1, k2: v2, ...}. */
    static synchronized void emit(String event, Object... keyValues) {
        Map<String, Object> obj = new LinkedHashMap<>();
        obj.put("e", event);
        obj.put("t", (System.nanoTime() - START_NS) / 1_000_000);
        for (int i = 0; i + 1 < keyValues.length; i += 2) {
            obj.put((String) keyValues[i], keyValues[i + 1]);
        }
        System.out.println(json(obj));
        System.out.flush();
    }

    static String json(Object value) {
        StringBuilder sb = new StringBuilder();
        write(sb, value);
        return sb.toString();
    }

    private static void write(StringBuilder sb, Object value) {
        if (value instanceof Optional) {
            value = ((Optional<?>) value).orElse(null);
        }
        if (value == null) {
            sb.append("null");
        } else if (value instanceof Number || value instanceof Boolean) {
            sb.append(value);
        } else if (value instanceof Map) {
            sb.append('{');
            Iterator<? extends Map.Entry<?, ?>> it = ((Map<?, ?>) value).entrySet().iterator();
            while (it.hasNext()) {
                Map.Entry<?, ?> entry = it.next();
                writeString(sb, String.valueOf(entry.getKey()));
                sb.append(':');
                write(sb, entry.getValue());
                if (it.hasNext()) sb.append(',');
            }
            sb.append('}');
        } else if (value instanceof Collection) {
            sb.append('[');
            Iterator<?> it = ((Collection<?>) value).iterator();
            while (it.hasNext()) {
                write(sb, it.next());
                if (it.hasNext()) sb.append(',');
            }
            sb.append(']');
        } else {
            writeString(sb, value.toString());
        }
    }

    private static void writeString(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        sb.append('"');
    }
}
