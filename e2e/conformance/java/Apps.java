import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** What the application programs (StreamsApp, ConnectApp) share: child JVMs, waiting, results. */
final class Apps {
    private Apps() {}

    /** What is still missing ("" when nothing is). */
    interface Missing {
        String get() throws Exception;
    }

    /** A JVM running mainClass on this program's class path, its output in work/log. */
    static Process childJvm(Path work, String log, String heap, String mainClass, String... args) throws Exception {
        return childJvmLogging(work, log, System.getProperty("log4j2.configurationFile"), heap, mainClass, args);
    }

    /** childJvm with its own log4j2 configuration file (null: log4j2's default). */
    static Process childJvmLogging(Path work, String log, String log4j, String heap, String mainClass, String... args) throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        List<String> cmd = new ArrayList<>(List.of(java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx" + heap));
        if (log4j != null) cmd.add("-Dlog4j2.configurationFile=" + log4j);
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), mainClass));
        cmd.addAll(List.of(args));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(work.resolve(log).toFile()).start();
    }

    /** Polls until nothing is missing; fails with what still is when `wait` passes or the application dies. */
    static void waitFor(Duration wait, String what, Process app, Missing missing) throws Exception {
        long deadline = System.nanoTime() + wait.toNanos();
        for (String m = missing.get(); !m.isEmpty(); m = missing.get()) {
            if (!app.isAlive()) throw new AssertionError("the application exited (" + app.exitValue() + ") before " + what + ": " + m);
            if (System.nanoTime() > deadline) throw new AssertionError("timed out waiting for " + what + ": " + m);
            Thread.sleep(500);
        }
    }

    /** The suite's RESULT line; an empty failure is a pass. */
    static void result(String scenario, String failure) {
        System.out.println("RESULT\t" + scenario + "\t" + (failure.isEmpty() ? "PASS\t" : "FAIL\t" + failure));
        System.out.flush();
    }
}
