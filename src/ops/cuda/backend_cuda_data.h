/* Input-side helpers for the CUDA backend that the training loop uses with a data
 * loader. Only built with CUDA. */
#ifndef GP_BACKEND_CUDA_DATA_H
#define GP_BACKEND_CUDA_DATA_H

#include "nn/net.h"

/* Wait until all work the net has queued on the GPU is done. The loop calls it
 * before copying a batch in, so the copy's timing is the copy alone and not the
 * tail of the previous step's compute (the copy waits for that anyway). */
int cuda_net_wait(const struct net *net);

#endif
