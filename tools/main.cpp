#include <cstdio>
int main() { std::puts("h3"); return 0; }
