/* The process group's TCP transport (dist.c dispatches to it; dist_priv.h lists
 * what it offers): frames, sockets, sends and reads with deadlines and ABORT frames,
 * rank 0's rendezvous (serve) and the others' (join), and the collectives.
 *
 * TCP: rank 0 is the hub. Every other rank holds one connection to it; a collective
 * is a gather to rank 0 (which reduces as it reads) followed by a broadcast from it,
 * in chunks of DIST_CHUNK bytes, each rank in lock step with rank 0 so that no two
 * processes ever wait to write to each other. Messages are frames: a header (magic,
 * type, the collective, payload length) and the payload. Every wait is a poll with
 * the group's timeout, and while rank 0 waits on one rank it watches the others, so a
 * rank that aborts or closes its connection anywhere is seen at once; rank 0 relays
 * the failure to every other rank as an ABORT frame naming the rank and its reason.
 * The ranks share one host architecture (native byte order in the frames). */
#include "dist/dist_priv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

#define DIST_MAGIC 0x54445047u /* "GPDT" */
#define DIST_PROTOCOL 1
#define DIST_CHUNK ((size_t)4 << 20)
/* Other ranks wait this much longer than rank 0, so that rank 0's verdict naming the
 * rank that stalled reaches them before their own timeout blames rank 0. */
#define DIST_GRACE_S 2.0
/* How long an ABORT frame may take to leave: the peer may be gone. */
#define DIST_ABORT_SEND_S 1.0

enum frame_type { F_HELLO = 1, F_WELCOME, F_DATA, F_ABORT };
enum coll {
	C_HELLO = 0, C_BARRIER, C_BCAST, C_ALLREDUCE, C_GATHER,
};
static const char *const coll_names[] = { "rendezvous", "dist_barrier", "dist_bcast",
					  "dist_allreduce_sum", "dist_gather" };

struct frame_hdr {
	uint32_t magic;
	uint16_t type, coll;
	uint64_t len;
};

struct hello {
	uint32_t protocol;
	int32_t world, rank;
	char job[64];
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void fd_close(struct dist *d, int peer)
{
	int i = d->rank == 0 ? peer : 0;
	if (d->fd && d->fd[i] >= 0) {
		close(d->fd[i]);
		d->fd[i] = -1;
	}
}

static int peer_fd(const struct dist *d, int peer)
{
	return d->fd[d->rank == 0 ? peer : 0];
}

/* Send a whole buffer within limit_s without watching anything else: for ABORT
 * frames, whose receiver may be gone. 0 when it all left. */
static int send_best_effort(int fd, const void *buf, size_t n, double limit_s)
{
	double deadline = now_s() + limit_s;
	const char *p = buf;
	while (n > 0 && fd >= 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0) {
			p += k;
			n -= (size_t)k;
			continue;
		}
		if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		double left = deadline - now_s();
		if (left <= 0)
			return -1;
		struct pollfd pf = { .fd = fd, .events = POLLOUT };
		poll(&pf, 1, (int)(left * 1e3) + 1);
	}
	return n == 0 ? 0 : -1;
}

static void abort_frame_send(int fd, int origin, const char *why)
{
	char buf[sizeof(struct frame_hdr) + 4 + 400];
	size_t wl = strnlen(why, 399);
	struct frame_hdr h = { DIST_MAGIC, F_ABORT, 0, 4 + wl };
	int32_t o = origin;
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), &o, 4);
	memcpy(buf + sizeof(h) + 4, why, wl);
	send_best_effort(fd, buf, sizeof(h) + 4 + wl, DIST_ABORT_SEND_S);
}

/* An ABORT frame to peer; where a frame to it was cut short, the connection is
 * closed instead: bytes of another kind in the middle of a frame would be read as
 * data, and the end of the connection cannot be. */
static void send_abort_frame(struct dist *d, int peer, int origin, const char *why)
{
	if (d->send_left[d->rank == 0 ? peer : 0] > 0) {
		fd_close(d, peer);
		return;
	}
	abort_frame_send(peer_fd(d, peer), origin, why);
}

/* Record that rank origin failed for why, tell the others (rank 0 relays to every
 * rank still connected), and return the error every caller gets from now on. */
static int GP_PRINTF(3, 4) group_fail(struct dist *d, int origin, const char *fmt, ...)
{
	if (d->failed)
		return group_error(d);
	char why[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	d->failed = 1;
	snprintf(d->failure, sizeof(d->failure), "rank %d failed: %s", origin, why);
	d->fail_origin = origin;
	snprintf(d->fail_why, sizeof(d->fail_why), "%s", why);
	/* origin too: where the fault is in the protocol, it does not know yet. A rank
	 * in the middle of a frame from us hears it when frame_send has finished it. */
	if (d->kind == T_TCP && d->rank == 0)
		for (int r = 1; r < d->world; r++)
			if (d->fd[r] >= 0 && d->send_left[r] == 0)
				abort_frame_send(d->fd[r], origin, why);
	return group_error(d);
}

/* Read exactly n bytes that are known to be on their way (an ABORT frame's rest). */
static int recv_now(int fd, void *buf, size_t n, double limit_s)
{
	double deadline = now_s() + limit_s;
	char *p = buf;
	while (n > 0) {
		ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
		if (k > 0) {
			p += k;
			n -= (size_t)k;
			continue;
		}
		if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return -1;
		double left = deadline - now_s();
		if (left <= 0)
			return -1;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		poll(&pf, 1, (int)(left * 1e3) + 1);
	}
	return 0;
}

/* The payload of an ABORT frame whose header was read: the rank that failed and why. */
static int abort_received(struct dist *d, int peer, const struct frame_hdr *h)
{
	char body[4 + 400] = { 0 };
	size_t n = h->len < sizeof(body) - 1 ? (size_t)h->len : sizeof(body) - 1;
	int32_t origin = peer;
	if (n >= 4 && recv_now(peer_fd(d, peer), body, n, DIST_ABORT_SEND_S) == 0) {
		memcpy(&origin, body, 4);
		body[n] = 0;
	} else {
		snprintf(body + 4, sizeof(body) - 4, "aborted (reason lost)");
	}
	return group_fail(d, origin, "%s", body + 4);
}

/* A peer's connection is readable while nothing is expected from it: an ABORT
 * frame, its end, or the next collective's data from a rank that is ahead (left
 * where it is). Returns 1 for data, or for an end when end_ok (a rank that had all
 * of the current collective may leave; its next read finds the end), else the
 * group's error. */
static int peer_peek(struct dist *d, int peer, int end_ok)
{
	struct frame_hdr h;
	int fd = peer_fd(d, peer);
	ssize_t k = recv(fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
	if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
		if (end_ok)
			return 1;
		fd_close(d, peer);
		return group_fail(d, peer, "exited or closed its connection");
	}
	if (k == (ssize_t)sizeof(h) && h.magic == DIST_MAGIC && h.type == F_ABORT) {
		recv_now(fd, &h, sizeof(h), DIST_ABORT_SEND_S);
		return abort_received(d, peer, &h);
	}
	return 1;
}

static int no_answer(struct dist *d, int peer, double limit_s)
{
	/* a rank other than 0 cannot tell rank 0's silence from that of a rank rank 0
	 * waits for */
	if (d->rank != 0)
		return group_fail(d, peer, "no answer within %.0f s (it or a rank it waits for is stuck)",
				  limit_s);
	return group_fail(d, peer, "no answer within %g s", limit_s);
}

/* Wait until peer's connection is ready for ev (POLLIN or POLLOUT), watching every
 * other connection for a failure meanwhile. 0 when ready, else the group's error. */
static int wait_peer(struct dist *d, int peer, short ev)
{
	double limit = d->timeout_s + (d->rank != 0 ? DIST_GRACE_S : 0);
	double deadline = now_s() + limit;
	int n = d->rank == 0 ? d->world : 1;
	struct pollfd pf[n];
	int who[n];
	/* what to watch on each rank's connection: POLLIN until it shows data that
	 * belongs to a later frame (a rank ahead of us), which then stays where it is */
	short watch[n];
	for (int i = 0; i < n; i++)
		watch[i] = POLLIN;
	int self = d->rank == 0 ? peer : 0;
	for (;;) {
		int m = 0;
		for (int r = 0; r < n; r++) {
			int fd = d->rank == 0 ? d->fd[r] : d->fd[0];
			short e = r == self ? (short)(ev | watch[r]) : watch[r];
			if (fd < 0 || !e)
				continue;
			pf[m] = (struct pollfd){ .fd = fd, .events = e };
			who[m++] = r;
		}
		double left = deadline - now_s();
		if (left <= 0)
			return no_answer(d, peer, limit);
		int k = poll(pf, (nfds_t)m, (int)(left * 1e3) + 1);
		if (k < 0 && errno != EINTR)
			return group_fail(d, d->rank, "poll: %s", strerror(errno));
		if (k <= 0)
			continue;
		for (int i = 0; i < m; i++) {
			short re = pf[i].revents;
			if (!re)
				continue;
			int r = who[i];
			if (r == self && ev == POLLIN)
				return 0; /* data, or its end: the read says which */
			if (re & (POLLIN | POLLHUP | POLLERR)) {
				int rc = peer_peek(d, d->rank == 0 ? r : 0,
						   d->rank == 0 && r != self && !d->owed[r]);
				if (rc < 0)
					return rc;
				watch[r] = 0;
			}
			if (r == self && (re & POLLOUT))
				return 0;
		}
	}
}

static int send_all(struct dist *d, int peer, const void *buf, size_t n)
{
	const char *p = buf;
	size_t *left = &d->send_left[d->rank == 0 ? peer : 0];
	while (n > 0) {
		ssize_t k = send(peer_fd(d, peer), p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0) {
			p += k;
			n -= (size_t)k;
			*left -= (size_t)k;
			continue;
		}
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			GP_TRY(wait_peer(d, peer, POLLOUT));
			continue;
		}
		if (k < 0 && (errno == EPIPE || errno == ECONNRESET)) {
			/* what it sent before it went may say why */
			int rc = peer_peek(d, peer, 0);
			if (rc < 0)
				return rc;
			fd_close(d, peer);
			return group_fail(d, peer, "exited or closed its connection");
		}
		fd_close(d, peer);
		return group_fail(d, peer, "send: %s", strerror(errno));
	}
	return 0;
}

static int recv_all(struct dist *d, int peer, void *buf, size_t n)
{
	char *p = buf;
	while (n > 0) {
		ssize_t k = recv(peer_fd(d, peer), p, n, MSG_DONTWAIT);
		if (k > 0) {
			p += k;
			n -= (size_t)k;
			continue;
		}
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			GP_TRY(wait_peer(d, peer, POLLIN));
			continue;
		}
		fd_close(d, peer);
		return group_fail(d, peer, "exited or closed its connection");
	}
	return 0;
}

static int frame_send(struct dist *d, int peer, enum frame_type t, enum coll c, const void *buf,
		      size_t n)
{
	struct frame_hdr h = { DIST_MAGIC, (uint16_t)t, (uint16_t)c, n };
	size_t *left = &d->send_left[d->rank == 0 ? peer : 0];
	*left = sizeof(h) + n;
	int rc = send_all(d, peer, &h, sizeof(h));
	if (rc == 0 && n)
		rc = send_all(d, peer, buf, n);
	if (rc == 0 || *left == 0 || peer_fd(d, peer) < 0)
		return rc;
	/* Cut short by a failure. Rank 0, hearing of another rank's: the frame is sound
	 * data, so finish it, then relay the failure; else close (see send_abort_frame). */
	size_t sent = sizeof(h) + n - *left;
	int fd = peer_fd(d, peer), done = d->rank == 0 && d->failed && d->fail_origin != peer;
	if (done && sent < sizeof(h))
		done = send_best_effort(fd, (const char *)&h + sent, sizeof(h) - sent,
					DIST_ABORT_SEND_S) == 0 &&
		       send_best_effort(fd, buf, n, DIST_ABORT_SEND_S) == 0;
	else if (done)
		done = send_best_effort(fd, (const char *)buf + (sent - sizeof(h)), n - (sent - sizeof(h)),
					DIST_ABORT_SEND_S) == 0;
	if (done) {
		*left = 0;
		abort_frame_send(fd, d->fail_origin, d->fail_why);
	} else {
		fd_close(d, peer);
	}
	return rc;
}

/* Read the next frame from peer, which must be type t of collective c with n bytes
 * (into buf); an ABORT frame instead is the group's failure. */
static int frame_recv(struct dist *d, int peer, enum frame_type t, enum coll c, void *buf,
		      size_t n)
{
	struct frame_hdr h;
	GP_TRY(recv_all(d, peer, &h, sizeof(h)));
	if (h.magic != DIST_MAGIC)
		return group_fail(d, peer, "sent bytes that are not gpuperf's protocol");
	if (h.type == F_ABORT)
		return abort_received(d, peer, &h);
	if (h.type != t || h.coll != c)
		return group_fail(d, peer, "called %s where rank %d called %s (ranks must call "
				  "the collectives in the same order)",
				  h.coll < 5 ? coll_names[h.coll] : "?", d->rank, coll_names[c]);
	if (h.len != n)
		return group_fail(d, peer, "%s of %llu bytes where rank %d has %zu (the sizes "
				  "must agree)", coll_names[c], (unsigned long long)h.len, d->rank, n);
	return n ? recv_all(d, peer, buf, n) : 0;
}

static int socket_setup(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void hello_fill(const struct dist *d, struct hello *h)
{
	memset(h, 0, sizeof(*h));
	h->protocol = DIST_PROTOCOL;
	h->world = d->world;
	h->rank = d->rank;
	snprintf(h->job, sizeof(h->job), "%s", d->job);
}

/* Rank 0's check of a rank's hello: the reason it is refused, or "" */
static void hello_check(const struct dist *d, const struct hello *h, const int *joined,
			char *why, size_t cap)
{
	why[0] = 0;
	if (h->protocol != DIST_PROTOCOL)
		snprintf(why, cap, "speaks protocol %u, rank 0 speaks %d (different gpuperf builds)",
			 h->protocol, DIST_PROTOCOL);
	else if (h->world != d->world)
		snprintf(why, cap, "has a world of %d, rank 0 of %d (the launch variables differ)",
			 (int)h->world, d->world);
	else if (strncmp(h->job, d->job, sizeof(h->job)))
		snprintf(why, cap, "belongs to job '%.63s', rank 0 to '%s' (two jobs at one port?)",
			 h->job, d->job);
	else if (h->rank < 1 || h->rank >= d->world || joined[h->rank])
		snprintf(why, cap, "claims rank %d, which is %s", (int)h->rank,
			 h->rank >= 1 && h->rank < d->world ? "taken" : "out of range");
}

/* Rank 0: listen, take every other rank's hello, then welcome them all. */
static int tcp_serve(struct dist *d, const struct dist_env *env, double deadline)
{
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, rc = 0;
	if (lfd < 0)
		return gp_error(GP_EIO, "socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)env->master_port),
				 .sin_addr.s_addr = htonl(INADDR_ANY) };
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, d->world) < 0 ||
	    socket_setup(lfd) < 0) {
		rc = gp_error(GP_EIO, "rank 0 cannot listen on port %d (MASTER_PORT): %s%s",
			      env->master_port, strerror(errno),
			      errno == EADDRINUSE ? " (another job there? choose another port)" : "");
		goto out;
	}
	int *joined = calloc((size_t)d->world, sizeof(int));
	if (!joined) {
		rc = gp_error(GP_ENOMEM, "out of memory");
		goto out;
	}
	int count = 1;
	joined[0] = 1;
	while (count < d->world) {
		double left = deadline - now_s();
		struct pollfd pf = { .fd = lfd, .events = POLLIN };
		if (left <= 0 || poll(&pf, 1, (int)(left * 1e3) + 1) == 0) {
			if (now_s() < deadline)
				continue;
			char missing[200] = "";
			size_t len = 0;
			for (int r = 1; r < d->world && len < sizeof(missing) - 16; r++)
				if (!joined[r])
					len += (size_t)snprintf(missing + len, sizeof(missing) - len,
								"%s%d", len ? ", " : "", r);
			d->failed = 1;
			snprintf(d->failure, sizeof(d->failure),
				 "rendezvous at port %d: rank%s %s did not join within %g s",
				 env->master_port, d->world - count > 1 ? "s" : "", missing,
				 d->timeout_s);
			for (int r = 1; r < d->world; r++)
				if (d->fd[r] >= 0)
					send_abort_frame(d, r, 0, d->failure);
			rc = group_error(d);
			break;
		}
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0 || socket_setup(c) < 0) {
			if (c >= 0)
				close(c);
			continue;
		}
		/* its hello, within what is left of the rendezvous */
		struct frame_hdr h;
		struct hello hi;
		if (recv_now(c, &h, sizeof(h), deadline - now_s()) < 0 || h.magic != DIST_MAGIC ||
		    h.type != F_HELLO || h.len != sizeof(hi) ||
		    recv_now(c, &hi, sizeof(hi), deadline - now_s()) < 0) {
			close(c); /* not one of ours, or gone */
			continue;
		}
		char why[300];
		hello_check(d, &hi, joined, why, sizeof(why));
		if (why[0]) {
			char msg[400];
			snprintf(msg, sizeof(msg), "rank 0 refused a rank: it %s", why);
			abort_frame_send(c, 0, msg);
			close(c);
			d->failed = 1;
			snprintf(d->failure, sizeof(d->failure), "rendezvous: rank %d %s",
				 (int)hi.rank, why);
			for (int r = 1; r < d->world; r++)
				if (d->fd[r] >= 0)
					send_abort_frame(d, r, 0, d->failure);
			rc = group_error(d);
			break;
		}
		d->fd[hi.rank] = c;
		joined[hi.rank] = 1;
		count++;
	}
	free(joined);
	if (rc == 0) {
		struct hello me;
		hello_fill(d, &me);
		for (int r = 1; r < d->world && rc == 0; r++)
			rc = frame_send(d, r, F_WELCOME, C_HELLO, &me, sizeof(me));
	}
out:
	close(lfd);
	return rc;
}

/* Another rank: connect to rank 0 (it may not listen yet: retry until deadline), say
 * hello, and wait for the welcome. */
static int tcp_join(struct dist *d, const struct dist_env *env, double deadline)
{
	char port[16], last[200] = "no attempt";
	snprintf(port, sizeof(port), "%d", env->master_port);
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai = NULL;
	int g = getaddrinfo(env->master_addr, port, &hints, &ai);
	if (g != 0)
		return gp_error(GP_EINVAL, "MASTER_ADDR '%s': %s", env->master_addr, gai_strerror(g));
	int fd = -1;
	double pause = 0.02;
	while (fd < 0 && now_s() < deadline) {
		int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c < 0 || socket_setup(c) < 0) {
			snprintf(last, sizeof(last), "socket: %s", strerror(errno));
			if (c >= 0)
				close(c);
			break;
		}
		int r = connect(c, ai->ai_addr, ai->ai_addrlen);
		if (r < 0 && errno == EINPROGRESS) {
			struct pollfd pf = { .fd = c, .events = POLLOUT };
			double left = deadline - now_s();
			if (poll(&pf, 1, left > 0 ? (int)(left * 1e3) + 1 : 0) == 1) {
				int err = 0;
				socklen_t len = sizeof(err);
				getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len);
				r = err ? -1 : 0;
				errno = err;
			} else {
				errno = ETIMEDOUT;
			}
		}
		if (r == 0) {
			fd = c;
			break;
		}
		snprintf(last, sizeof(last), "%s", strerror(errno));
		close(c);
		struct timespec ts = { 0, (long)(pause * 1e9) };
		nanosleep(&ts, NULL);
		pause = pause < 0.2 ? pause * 2 : 0.2;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return gp_error(GP_EDEVICE, "rank %d cannot reach rank 0 at %s:%d within %g s: %s",
				d->rank, env->master_addr, env->master_port, d->timeout_s, last);
	d->fd[0] = fd;
	struct hello me, them;
	hello_fill(d, &me);
	int rc = frame_send(d, 0, F_HELLO, C_HELLO, &me, sizeof(me));
	/* rank 0 waits for the slowest rank up to its own deadline: wait a little more */
	double saved = d->timeout_s;
	d->timeout_s = deadline - now_s() + DIST_GRACE_S;
	if (rc == 0)
		rc = frame_recv(d, 0, F_WELCOME, C_HELLO, &them, sizeof(them));
	d->timeout_s = saved;
	if (rc == 0 && (them.protocol != DIST_PROTOCOL || them.world != d->world))
		rc = gp_error(GP_EDEVICE, "rank 0 has protocol %u and a world of %d; rank %d has %d and %d",
			      them.protocol, (int)them.world, d->rank, DIST_PROTOCOL, d->world);
	return rc;
}

/* The TCP group's start, for dist_open (which frees what was set up when it fails). */
int tcp_open(struct dist *d, const struct dist_env *env)
{
	/* rank 0 listens on every interface: only the others need its address */
	if (d->rank != 0 && !env->master_addr[0])
		return gp_error(GP_EINVAL, "MASTER_ADDR is not set: ranks on several hosts need rank "
				"0's address (and MASTER_PORT)");
	if (env->master_port < 1 || env->master_port > 65535)
		return gp_error(GP_EINVAL, "MASTER_PORT=%d is out of range (1 to 65535)",
				env->master_port);
	/* every descriptor reads "none" before anything can fail: dist_close closes
	 * those that are set */
	d->fd = malloc((size_t)d->world * sizeof(int));
	for (int r = 0; d->fd && r < d->world; r++)
		d->fd[r] = -1;
	d->send_left = calloc((size_t)d->world, sizeof(size_t));
	if (!d->fd || !d->send_left)
		return gp_error(GP_ENOMEM, "out of memory");
	if (d->rank == 0 && (!(d->scratch = malloc(DIST_CHUNK)) ||
			     !(d->owed = calloc((size_t)d->world, 1))))
		return gp_error(GP_ENOMEM, "out of memory");
	double deadline = now_s() + d->timeout_s;
	return d->rank == 0 ? tcp_serve(d, env, deadline) : tcp_join(d, env, deadline);
}

/* dist_abort's word to the others: rank 0 to every rank, another rank to rank 0,
 * whose side of the connection it then closes for writing. */
void tcp_abort(struct dist *d, const char *why)
{
	if (d->rank == 0) {
		for (int r = 1; r < d->world; r++)
			if (d->fd[r] >= 0)
				send_abort_frame(d, r, 0, why);
	} else if (d->fd[0] >= 0) {
		send_abort_frame(d, 0, d->rank, why);
		shutdown(d->fd[0], SHUT_WR);
	}
}

int tcp_poll(struct dist *d)
{
	for (int r = d->rank == 0 ? 1 : 0; r < (d->rank == 0 ? d->world : 1); r++) {
		int fd = peer_fd(d, r);
		if (fd < 0)
			continue;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, 0) == 1) {
			int rc = peer_peek(d, r, 0);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* Rank 0 at the start of a collective: every rank is owed its part. */
static void hub_begin(struct dist *d)
{
	if (d->rank == 0)
		memset(d->owed, 1, (size_t)d->world);
}

static void hub_done(struct dist *d, int r)
{
	if (d->rank == 0)
		d->owed[r] = 0;
}

int tcp_barrier(struct dist *d)
{
	if (d->rank != 0) {
		GP_TRY(frame_send(d, 0, F_DATA, C_BARRIER, NULL, 0));
		return frame_recv(d, 0, F_DATA, C_BARRIER, NULL, 0);
	}
	hub_begin(d);
	for (int r = 1; r < d->world; r++)
		GP_TRY(frame_recv(d, r, F_DATA, C_BARRIER, NULL, 0));
	for (int r = 1; r < d->world; r++) {
		GP_TRY(frame_send(d, r, F_DATA, C_BARRIER, NULL, 0));
		hub_done(d, r);
	}
	return 0;
}

int tcp_bcast(struct dist *d, void *buf, size_t bytes, int root)
{
	char *p = buf;
	hub_begin(d);
	for (size_t off = 0; off < bytes; off += DIST_CHUNK) {
		size_t n = bytes - off < DIST_CHUNK ? bytes - off : DIST_CHUNK;
		int last = off + n == bytes;
		if (d->rank == 0) {
			if (root != 0)
				GP_TRY(frame_recv(d, root, F_DATA, C_BCAST, p + off, n));
			if (root != 0 && last)
				hub_done(d, root);
			for (int r = 1; r < d->world; r++)
				if (r != root) {
					GP_TRY(frame_send(d, r, F_DATA, C_BCAST, p + off, n));
					if (last)
						hub_done(d, r);
				}
		} else if (d->rank == root) {
			GP_TRY(frame_send(d, 0, F_DATA, C_BCAST, p + off, n));
		} else {
			GP_TRY(frame_recv(d, 0, F_DATA, C_BCAST, p + off, n));
		}
	}
	return 0;
}

static void add_into(void *dst, const void *src, size_t count, enum gp_dtype t)
{
	if (t == GP_F64) {
		double *a = dst;
		const double *b = src;
		for (size_t i = 0; i < count; i++)
			a[i] += b[i];
	} else {
		float *a = dst;
		const float *b = src;
		for (size_t i = 0; i < count; i++)
			a[i] += b[i];
	}
}

/* Rank 0 adds the other ranks' chunks to its own in rank order, so that every rank
 * gets the same bits whatever the timing. */
int tcp_allreduce(struct dist *d, void *buf, size_t count, enum gp_dtype dtype)
{
	size_t elem = dtype_size(dtype), bytes = count * elem;
	char *p = buf;
	hub_begin(d);
	for (size_t off = 0; off < bytes; off += DIST_CHUNK) {
		size_t n = bytes - off < DIST_CHUNK ? bytes - off : DIST_CHUNK;
		if (d->rank != 0) {
			GP_TRY(frame_send(d, 0, F_DATA, C_ALLREDUCE, p + off, n));
			GP_TRY(frame_recv(d, 0, F_DATA, C_ALLREDUCE, p + off, n));
			continue;
		}
		for (int r = 1; r < d->world; r++) {
			GP_TRY(frame_recv(d, r, F_DATA, C_ALLREDUCE, d->scratch, n));
			add_into(p + off, d->scratch, n / elem, dtype);
		}
		for (int r = 1; r < d->world; r++) {
			GP_TRY(frame_send(d, r, F_DATA, C_ALLREDUCE, p + off, n));
			if (off + n == bytes)
				hub_done(d, r);
		}
	}
	return 0;
}

int tcp_gather(struct dist *d, const void *send, size_t bytes, void *recv, int root)
{
	size_t total = bytes * (size_t)d->world;
	if (d->rank != 0) {
		const char *p = send;
		for (size_t off = 0; off < bytes; off += DIST_CHUNK) {
			size_t n = bytes - off < DIST_CHUNK ? bytes - off : DIST_CHUNK;
			GP_TRY(frame_send(d, 0, F_DATA, C_GATHER, p + off, n));
		}
		if (d->rank != root)
			return 0;
		char *q = recv;
		for (size_t off = 0; off < total; off += DIST_CHUNK) {
			size_t n = total - off < DIST_CHUNK ? total - off : DIST_CHUNK;
			GP_TRY(frame_recv(d, 0, F_DATA, C_GATHER, q + off, n));
		}
		return 0;
	}
	char *all = root == 0 ? recv : malloc(total ? total : 1);
	if (!all)
		return gp_error(GP_ENOMEM, "dist_gather: out of memory for %zu bytes", total);
	int rc = 0;
	memcpy(all, send, bytes);
	hub_begin(d);
	for (int r = 1; r < d->world && rc == 0; r++) {
		for (size_t off = 0; off < bytes && rc == 0; off += DIST_CHUNK) {
			size_t n = bytes - off < DIST_CHUNK ? bytes - off : DIST_CHUNK;
			rc = frame_recv(d, r, F_DATA, C_GATHER, all + (size_t)r * bytes + off, n);
		}
		if (r != root)
			hub_done(d, r); /* the others only send */
	}
	for (size_t off = 0; root != 0 && off < total && rc == 0; off += DIST_CHUNK) {
		size_t n = total - off < DIST_CHUNK ? total - off : DIST_CHUNK;
		rc = frame_send(d, root, F_DATA, C_GATHER, all + off, n);
	}
	if (root != 0)
		free(all);
	return rc;
}
