#include "tap.h"
int main(void) { skip_all("not yet written"); }
