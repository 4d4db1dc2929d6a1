plan
attention
--docs
16384/8192,,8192
