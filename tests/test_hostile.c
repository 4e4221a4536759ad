/* The hostile battery: gpuperf as a careless or hostile user meets it. Each case is a
 * command line (or a shell line around one), an optional set-up and check, and the
 * way it must end: its exit code, for an error exactly one error line holding a given
 * text, no hang (every case runs under a time limit), no sanitizer report, no
 * temporary file or empty run folder left, and every file present before the case
 * (an earlier result among them) byte for byte the same afterwards. The cases are in
 * hostile_cases.c; this file plays them and judges how each ends.
 *
 * HOSTILE_REPORT=FILE writes how each case ends as a Markdown table (docs/robustness.md
 * holds one); HOSTILE_TIMEOUT changes the time limit (20 s). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostile.h"
#include "test.h"

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return calloc(1, 1);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc(n + 1);
	size_t got = b ? fread(b, 1, n, f) : 0;
	if (b)
		b[got] = 0;
	fclose(f);
	return b;
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* The driver runs one case in DIR/w: the earlier result, the set-up, a list of the
 * files there, the command under the time limit, then the checks that hold for every
 * case; what fails goes to DIR/problems. */
static const char driver[] =
	"D=$1; flags=$2; cd \"$D/w\" || exit 90; export GPUPERF_RESULTS=res\n"
	"unmount() { for m in ro full; do [ -d $m ] && mountpoint -q $m && umount $m; done; true; }\n"
	"mkdir -p res/train_earlier && cp \"$F/train.json\" res/train_earlier/\n"
	"if [ -f ../setup.sh ]; then sh ../setup.sh > ../setup.log 2>&1; s=$?\n"
	"  [ $s = 77 ] && { echo skip > ../skipped; unmount; exit 0; }\n"
	"  [ $s = 0 ] || { echo \"set-up failed ($s): $(cat ../setup.log)\" >> ../problems; unmount; exit 0; }\n"
	"fi\n"
	"find . -type f ! -path './res/latest*' -exec md5sum {} + > ../before.md5 2>/dev/null\n"
	"timeout -k 5 \"$TMO\" sh ../case.sh > ../out.log 2>&1 < /dev/null; echo $? > ../rc\n"
	"if [ -f ../after.sh ]; then sh ../after.sh > ../after.log 2>&1 || "
	"echo \"check after failed: $(head -c 300 ../after.log)\" >> ../problems; fi\n"
	"if [ \"$flags\" != changes ]; then md5sum -c --quiet ../before.md5 > ../md5.log 2>&1 || "
	"echo \"changed: $(head -c 300 ../md5.log)\" >> ../problems; fi\n"
	"find . \\( -name '.*.tmp*' -o -name '*.tmp' \\) -printf 'left behind: %p\\n' -o "
	"-path './res/*' -type d -empty -printf 'empty run folder: %p\\n' 2>/dev/null | head -3 >> ../problems\n"
	"unmount\n"
	"[ -d ro ] && chmod -R u+rwX . 2>/dev/null; exit 0\n";

/* The line of out that holds needle (or its last line), in buf. */
static void line_with(const char *out, const char *needle, char *buf, size_t cap)
{
	const char *p = needle && *needle ? strstr(out, needle) : NULL, *s, *e;
	if (p) {
		for (s = p; s > out && s[-1] != '\n'; s--)
			;
	} else {
		e = out + strlen(out);
		while (e > out && e[-1] == '\n')
			e--;
		for (s = e; s > out && s[-1] != '\n'; s--)
			;
	}
	for (e = s; *e && *e != '\n'; e++)
		;
	size_t n = (size_t)(e - s) < cap - 1 ? (size_t)(e - s) : cap - 1;
	memcpy(buf, s, n);
	buf[n] = 0;
}

/* How many lines of out hold "error:", and the first of them in buf. */
static int error_lines(const char *out, char *buf, size_t cap)
{
	int n = 0;
	buf[0] = 0;
	for (const char *s = out; *s;) {
		const char *e = strchr(s, '\n');
		size_t len = e ? (size_t)(e - s) : strlen(s);
		char *hit = memmem(s, len, "error:", 6);
		if (hit && !n++) {
			size_t k = len < cap - 1 ? len : cap - 1;
			memcpy(buf, s, k);
			buf[k] = 0;
		}
		s += len + (e != NULL);
	}
	return n;
}

/* Markdown-safe: pipes escaped, bytes outside printable ASCII as \xNN, the shell
 * variables named. */
static void md_escape(FILE *f, const char *s, size_t max)
{
	size_t n = 0;
	for (; *s && n < max; s++, n++) {
		unsigned char c = (unsigned char)*s;
		if (c == '|')
			fputs("\\|", f);
		else if (c == '`')
			fputc('\'', f);
		else if (c < 32 || c > 126)
			fprintf(f, "\\x%02X", c);
		else
			fputc(c, f);
	}
	if (*s)
		fputs("...", f);
}

/* A case's command as a reader would type it: "$G" is gpuperf, "$F/" the fixtures. */
static void md_command(FILE *f, const char *cmd)
{
	char buf[4096];
	size_t n = 0;
	for (const char *s = cmd; *s && n + 16 < sizeof(buf);) {
		if (!strncmp(s, "\"$G\"", 4)) {
			n += (size_t)sprintf(buf + n, "gpuperf");
			s += 4;
		} else if (!strncmp(s, "$F/", 3)) {
			n += (size_t)sprintf(buf + n, "fixtures/");
			s += 3;
		} else {
			buf[n++] = *s++;
		}
	}
	buf[n] = 0;
	md_escape(f, buf, 160);
}

struct outcome {
	int rc, skipped;
	char line[512];
	char why[1024];
};

/* Run one case; why is empty when it ended as it must. */
static void run_case(const struct hcase *c, int idx, const char *root, struct outcome *o)
{
	char dir[600], path[700], cmd[2048];
	memset(o, 0, sizeof(*o));
	snprintf(dir, sizeof(dir), "%s/c%03d", root, idx);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s/w'", dir);
	if (system(cmd) != 0) {
		snprintf(o->why, sizeof(o->why), "cannot make %s", dir);
		return;
	}
	snprintf(path, sizeof(path), "%s/case.sh", dir);
	if (c->cmd[0] == '!') {
		put(path, c->cmd + 1);
	} else {
		char *line = malloc(strlen(c->cmd) + 32);
		sprintf(line, "exec \"$G\" %s\n", c->cmd);
		put(path, line);
		free(line);
	}
	if (c->setup) {
		snprintf(path, sizeof(path), "%s/setup.sh", dir);
		put(path, c->setup);
	}
	if (c->after) {
		snprintf(path, sizeof(path), "%s/after.sh", dir);
		put(path, c->after);
	}
	snprintf(cmd, sizeof(cmd), "sh '%s/driver.sh' '%s' %s", root, dir,
		 c->flags & H_CHANGES ? "changes" : "-");
	if (test_run(cmd, NULL, 0) != 0) {
		snprintf(o->why, sizeof(o->why), "the driver failed");
		return;
	}
	snprintf(path, sizeof(path), "%s/skipped", dir);
	if (access(path, F_OK) == 0) {
		o->skipped = 1;
		snprintf(path, sizeof(path), "%s/setup.log", dir);
		char *why = slurp(path);
		why[strcspn(why, "\n")] = 0;
		snprintf(o->line, sizeof(o->line), "skipped: %s", *why ? why : "the set-up cannot run here");
		free(why);
		return;
	}
	snprintf(path, sizeof(path), "%s/rc", dir);
	char *rcs = slurp(path);
	o->rc = atoi(rcs);
	free(rcs);
	snprintf(path, sizeof(path), "%s/out.log", dir);
	char *out = slurp(path);
	snprintf(path, sizeof(path), "%s/problems", dir);
	char *problems = slurp(path);
	size_t w = 0;
#define WHY(...) (w += snprintf(o->why + w, w < sizeof(o->why) ? sizeof(o->why) - w : 0, __VA_ARGS__))
	char err[512];
	int n_err = error_lines(out, err, sizeof(err));
	if (o->rc == 124 || o->rc == 137)
		WHY("hung: still running after the time limit; ");
	else if (o->rc != c->rc)
		WHY("exit %d, expected %d; ", o->rc, c->rc);
	if (strstr(out, "ERROR: AddressSanitizer") || strstr(out, "ERROR: LeakSanitizer") ||
	    strstr(out, "runtime error:") || strstr(out, "SUMMARY: "))
		WHY("sanitizer report; ");
	if (c->rc == 1 || c->rc == 2) {
		if (n_err != 1)
			WHY("%d error lines; ", n_err);
		else if (c->line && !strstr(err, c->line))
			WHY("the error line lacks '%s'; ", c->line);
		if (c->rc == 2 && !(c->flags & H_LINES) && test_count_lines(out) != 1)
			WHY("%d lines of output; ", test_count_lines(out));
		snprintf(o->line, sizeof(o->line), "%s", n_err ? err : "");
		if (!n_err)
			line_with(out, NULL, o->line, sizeof(o->line));
	} else {
		if (c->rc == 0 && n_err && !(c->flags & H_LINES))
			WHY("an error line: %.200s; ", err);
		if (c->line && *c->line && !strstr(out, c->line))
			WHY("the output lacks '%s'; ", c->line);
		line_with(out, c->line, o->line, sizeof(o->line));
	}
	if (*problems)
		WHY("%s", problems);
	/* the fixtures' folder changes from run to run: the table names it "fixtures" */
	const char *fx = getenv("F");
	char *at;
	if (fx && *fx && (at = strstr(o->line, fx))) {
		size_t fl = strlen(fx);
		memmove(at + 8, at + fl, strlen(at + fl) + 1);
		memcpy(at, "fixtures", 8);
	}
	if (w && !strstr(o->why, "output:")) {
		char tail[300];
		line_with(out, NULL, tail, sizeof(tail));
		WHY(" [last line: %s]", tail);
	}
#undef WHY
	free(out);
	free(problems);
}

/* Fixtures shared by the cases, made once with gpuperf itself. */
static int make_fixtures(const char *root, char *fx, size_t cap)
{
	char cmd[4096], out[8192];
	snprintf(fx, cap, "%s/fx", root);
	snprintf(cmd, sizeof(cmd),
		 "set -e; mkdir -p '%s/trace'; cp tests/data/sample_trace/profiler_trace.json '%s/trace/'; "
		 "cp tests/data/sample_amp.json tests/data/sample_maxbatch.json tests/data/sample_workers.json "
		 "'%s/'; cp -r tests/data/bad '%s/bad'; cd '%s'; "
		 "\"$G\" dataset make --out ds --classes 2 --images 8 --size 40x40 --threads 1 --seed 3; "
		 "\"$G\" " TR "--out r --save w.safetensors; cp r/train.json train.json",
		 fx, fx, fx, fx, fx);
	int rc = test_run(cmd, out, sizeof(out));
	if (rc != 0)
		printf("    fixtures: %s\n", out);
	return rc;
}

TEST(hostile_battery)
{
	char root[300], bin[PATH_MAX], fx[400], path[400];
	const char *report = getenv("HOSTILE_REPORT"), *tmo = getenv("HOSTILE_TIMEOUT");
	snprintf(root, sizeof(root), "%s", test_tmpdir());
	if (!realpath(test_bin(), bin)) {
		CHECK_MSG(0, "no gpuperf at %s", test_bin());
		return;
	}
	setenv("G", bin, 1);
	setenv("TMO", tmo && *tmo ? tmo : "20", 1);
	if (make_fixtures(root, fx, sizeof(fx)) != 0) {
		CHECK_MSG(0, "cannot make the fixtures");
		return;
	}
	setenv("F", fx, 1);
	snprintf(path, sizeof(path), "%s/driver.sh", root);
	put(path, driver);

	size_t n;
	struct hcase *all = hostile_cases(&n);
	if (!all) {
		CHECK_MSG(0, "out of memory");
		return;
	}

	FILE *rep = report && *report ? fopen(report, "w") : NULL;
	if (rep)
		fprintf(rep, "| # | case | command | how it ends |\n|---|---|---|---|\n");
	int passed = 0, failed = 0, known = 0, skipped = 0;
	for (size_t i = 0; i < n; i++) {
		const struct hcase *c = &all[i];
		struct outcome o;
		run_case(c, (int)i, root, &o);
		const char *status;
		if (o.skipped) {
			skipped++;
			status = "skipped";
		} else if (!o.why[0]) {
			passed++;
			status = c->known ? "passes (was a known failure)" : NULL;
		} else if (c->known) {
			known++;
			status = "known failure";
		} else {
			failed++;
			status = "FAILS";
			CHECK_MSG(0, "case '%s': %s", c->name, o.why);
		}
		if (getenv("HOSTILE_VERBOSE"))
			printf("    %-40s %s exit %d: %s\n", c->name, o.why[0] ? o.why : "ok", o.rc, o.line);
		if (!rep)
			continue;
		fprintf(rep, "| %zu | ", i + 1);
		md_escape(rep, c->name, 80);
		fprintf(rep, " | `");
		if (c->cmd[0] != '!')
			fprintf(rep, "gpuperf ");
		md_command(rep, c->cmd[0] == '!' ? c->cmd + 1 : c->cmd);
		fprintf(rep, "` | ");
		if (o.skipped) {
			md_escape(rep, o.line, 200);
		} else {
			fprintf(rep, o.rc > 128 ? "killed by signal %d" : "exit %d", o.rc > 128 ? o.rc - 128 : o.rc);
			if (o.line[0]) {
				fprintf(rep, ": ");
				md_escape(rep, o.line, 200);
			}
		}
		if (status) {
			fprintf(rep, " (**%s**", status);
			if (c->known) {
				fprintf(rep, ": ");
				md_escape(rep, c->known, 300);
			}
			fprintf(rep, ")");
		}
		fprintf(rep, " |\n");
	}
	if (rep) {
		fprintf(rep, "\n%zu cases: %d end as they must, %d known failures, %d skipped, %d fail.\n",
			n, passed, known, skipped, failed);
		fclose(rep);
	}
	printf("    hostile: %zu cases, %d as they must, %d known failures, %d skipped, %d failed\n", n,
	       passed, known, skipped, failed);
	hostile_cases_free(all, n);
}
