/* safetensors checkpoints (--load, checkpoint_list): the header length, the JSON
 * header, dtypes, shapes and data offsets, and loading into a small net whose keys
 * the dictionary names, so that inputs get past the key match into conversion. */
#include "fuzz.h"

#include <string.h>

#include "core/error.h"
#include "nn/checkpoint.h"

static struct net net;

static void state_add(const char *name, enum state_kind kind, int node, int ndim,
		      const int64_t *dims)
{
	struct state_entry *e = &net.state[net.n_state++];
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->kind = kind;
	e->node = node;
	e->ndim = ndim;
	e->numel = 1;
	for (int d = 0; d < ndim; d++) {
		e->dims[d] = dims[d];
		e->numel *= (size_t)dims[d];
	}
	if (kind == STATE_PARAM) {
		e->offset = net.params_count;
		net.params_count += e->numel;
		net.n_params++;
	} else if (kind == STATE_RUNNING) {
		e->offset = net.running_count;
		net.running_count += e->numel;
	}
}

/* conv -> batch norm -> linear, with torchvision's keys (as tests/test_checkpoint.c). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_json_seed();
	snprintf(net.model, sizeof(net.model), "fuzz");
	net.n_nodes = 3;
	state_add("conv1.weight", STATE_PARAM, 0, 4, (int64_t[]){ 2, 1, 1, 1 });
	state_add("bn1.weight", STATE_PARAM, 1, 1, (int64_t[]){ 2 });
	state_add("bn1.bias", STATE_PARAM, 1, 1, (int64_t[]){ 2 });
	state_add("fc.weight", STATE_PARAM, 2, 2, (int64_t[]){ 3, 2 });
	state_add("bn1.running_mean", STATE_RUNNING, 1, 1, (int64_t[]){ 2 });
	state_add("bn1.running_var", STATE_RUNNING, 1, 1, (int64_t[]){ 2 });
	state_add("bn1.num_batches_tracked", STATE_COUNTER, 1, 0, NULL);
	net.host_params = calloc(net.params_count, sizeof(float));
	net.host_running = calloc(net.running_count, sizeof(float));
	if (!net.host_params || !net.host_running)
		fuzz_die("out of memory");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_input_file(data, size);
	checkpoint_list(path, fuzz_devnull());
	checkpoint_load(&net, path);
	gp_error_clear();
	return 0;
}
