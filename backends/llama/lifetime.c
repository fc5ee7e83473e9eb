// lifetime.c: a context's GPU backends are freed after its scheduler.
//
// The ollama module's ggml (its patch 0020, "no alloc mode") has
// ggml_backend_sched_free call each backend's reset, which for CUDA drops the
// backend's memory pools through its context. llama_context frees its backends
// before its scheduler (the members are destroyed in reverse order, and the
// scheduler is declared first), so that reset ran on a freed backend: the first
// llama_free of a context on an H200 died with SIGSEGV in libggml-cuda.so, after
// the context had computed correct vectors. ggml's CPU backend and embed-stack's
// own have no reset, so the CPU never showed it.
//
// llama.cpp and ggml stay unmodified. A hooked device's init_backend gives each
// backend with a reset a free that, while es_context_free runs llama_free on this
// thread, only queues the backend; es_context_free frees the queue once llama_free
// has returned, the scheduler gone. Anywhere else the free is immediate.
#include <pthread.h>
#include <stddef.h>

#include "ggml-backend-impl.h"
#include "lifetime.h"

enum { ES_MAX_HOOKED = 16, ES_MAX_DEFERRED = 64, ES_MAX_PROBED = 256 };

typedef ggml_backend_t (*es_init_fn)(ggml_backend_dev_t dev, const char *params);
typedef void (*es_free_fn)(ggml_backend_t backend);

// A hooked device: its own init_backend, and the free of the backends it creates
// (the same function for all of them; a backend with another is left unhooked).
struct es_hooked {
	ggml_backend_dev_t dev;
	es_init_fn init;
	es_free_fn free;
};

static pthread_mutex_t es_hook_mu = PTHREAD_MUTEX_INITIALIZER;
static struct es_hooked es_hooked_devs[ES_MAX_HOOKED];
static int es_n_hooked;

// The backends freed inside llama_free on this thread, waiting for it to return.
static _Thread_local bool es_deferring;
static _Thread_local ggml_backend_t es_deferred[ES_MAX_DEFERRED];
static _Thread_local int es_n_deferred;

// The test's probe (es_probe_resets): the live backends given a counting reset.
static bool es_probing;
static int es_probe_calls, es_probe_late;
static ggml_backend_t es_probed[ES_MAX_PROBED];
static int es_n_probed;

static struct es_hooked *es_hooked_for(ggml_backend_dev_t dev) {
	struct es_hooked *h = NULL;
	pthread_mutex_lock(&es_hook_mu);
	for (int i = 0; i < es_n_hooked; i++) {
		if (es_hooked_devs[i].dev == dev) {
			h = &es_hooked_devs[i];
		}
	}
	pthread_mutex_unlock(&es_hook_mu);
	return h;
}

// es_probed_index is b's place among the probed backends, or -1. Called with
// es_hook_mu held.
static int es_probed_index(ggml_backend_t b) {
	for (int i = 0; i < es_n_probed; i++) {
		if (es_probed[i] == b) {
			return i;
		}
	}
	return -1;
}

static void es_probe_reset(ggml_backend_t b) {
	pthread_mutex_lock(&es_hook_mu);
	es_probe_calls++;
	// Compared as a pointer only: a freed backend is never read here.
	if (es_probed_index(b) < 0) {
		es_probe_late++;
	}
	pthread_mutex_unlock(&es_hook_mu);
}

static void es_backend_free_now(ggml_backend_t b) {
	struct es_hooked *h = es_hooked_for(b->device);
	pthread_mutex_lock(&es_hook_mu);
	int i = es_probed_index(b);
	if (i >= 0) {
		es_probed[i] = es_probed[--es_n_probed];
	}
	pthread_mutex_unlock(&es_hook_mu);
	if (h != NULL && h->free != NULL) {
		h->free(b);
	}
}

static void es_backend_free(ggml_backend_t b) {
	if (es_deferring && es_n_deferred < ES_MAX_DEFERRED) {
		es_deferred[es_n_deferred++] = b;
		return;
	}
	es_backend_free_now(b);
}

static ggml_backend_t es_backend_init(ggml_backend_dev_t dev, const char *params) {
	struct es_hooked *h = es_hooked_for(dev);
	if (h == NULL) {
		return NULL;
	}
	ggml_backend_t b = h->init(dev, params);
	if (b == NULL) {
		return NULL;
	}
	pthread_mutex_lock(&es_hook_mu);
	if (es_probing && b->iface.reset == NULL && es_n_probed < ES_MAX_PROBED) {
		b->iface.reset = es_probe_reset;
		es_probed[es_n_probed++] = b;
	}
	if (b->iface.reset != NULL) {
		if (h->free == NULL) {
			h->free = b->iface.free;
		}
		if (b->iface.free == h->free) {
			b->iface.free = es_backend_free;
		}
	}
	pthread_mutex_unlock(&es_hook_mu);
	return b;
}

bool es_hook_device(ggml_backend_dev_t dev) {
	if (dev == NULL) {
		return false;
	}
	bool ok = true;
	pthread_mutex_lock(&es_hook_mu);
	bool hooked = false;
	for (int i = 0; i < es_n_hooked; i++) {
		hooked = hooked || es_hooked_devs[i].dev == dev;
	}
	if (!hooked) {
		if (es_n_hooked == ES_MAX_HOOKED) {
			ok = false;
		} else {
			es_hooked_devs[es_n_hooked++] = (struct es_hooked){.dev = dev, .init = dev->iface.init_backend};
			dev->iface.init_backend = es_backend_init;
		}
	}
	pthread_mutex_unlock(&es_hook_mu);
	return ok;
}

void es_context_free(struct llama_context *ctx) {
	if (ctx == NULL) {
		return;
	}
	es_deferring = true;
	llama_free(ctx);
	es_deferring = false;
	int n = es_n_deferred;
	es_n_deferred = 0;
	for (int i = 0; i < n; i++) {
		es_backend_free_now(es_deferred[i]);
	}
}

int es_probe_resets(bool on, int *late) {
	pthread_mutex_lock(&es_hook_mu);
	int calls = es_probe_calls;
	*late = es_probe_late;
	if (on) {
		es_probe_calls = 0;
		es_probe_late = 0;
	}
	es_probing = on;
	pthread_mutex_unlock(&es_hook_mu);
	return calls;
}
