/*
 * The two C++ exception entry points pandas' one C++ module (window.aggregations,
 * through libc++'s std::deque) calls when a container cannot grow. The Guest has no
 * exception handling (WebAssembly without its exception proposal, and Debian's
 * libc++abi for wasm32 is built without exceptions): a throw ends the program, as
 * libc++ does when built without exceptions.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

void *
__cxa_allocate_exception(size_t size)
{
	(void)size;
	fputs("C++ exception in a compiled module (out of memory?): aborting\n", stderr);
	abort();
}

void
__cxa_throw(void *exception, void *type, void (*destructor)(void *))
{
	(void)exception;
	(void)type;
	(void)destructor;
	fputs("C++ exception in a compiled module: aborting\n", stderr);
	abort();
}
