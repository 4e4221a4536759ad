#include "cmd/cmds.h"
#include "core/error.h"

int cmd_info(int argc, char **argv)
{
	return gp_error(GP_EUNSUPPORTED, "not built yet");
}
