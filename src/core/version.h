#ifndef GP_VERSION_H
#define GP_VERSION_H
#define GPUPERF_VERSION "0.1.0"
#endif
