
val negb : bool -> bool

val fst : ('a1 * 'a2) -> 'a1

val snd : ('a1 * 'a2) -> 'a2

val length : 'a1 list -> int

val app : 'a1 list -> 'a1 list -> 'a1 list

val sub : int -> int -> int

module Nat :
 sig
  val sub : int -> int -> int

  val divmod : int -> int -> int -> int -> int * int

  val div : int -> int -> int

  val modulo : int -> int -> int

  val eq_dec : int -> int -> bool
 end

val nth : int -> 'a1 list -> 'a1 -> 'a1

val nth_error : 'a1 list -> int -> 'a1 option

val last : 'a1 list -> 'a1 -> 'a1

val rev : 'a1 list -> 'a1 list

val list_eq_dec : ('a1 -> 'a1 -> bool) -> 'a1 list -> 'a1 list -> bool

val map : ('a1 -> 'a2) -> 'a1 list -> 'a2 list

val flat_map : ('a1 -> 'a2 list) -> 'a1 list -> 'a2 list

val fold_left : ('a1 -> 'a2 -> 'a1) -> 'a2 list -> 'a1 -> 'a1

val fold_right : ('a2 -> 'a1 -> 'a1) -> 'a1 -> 'a2 list -> 'a1

val existsb : ('a1 -> bool) -> 'a1 list -> bool

val forallb : ('a1 -> bool) -> 'a1 list -> bool

val filter : ('a1 -> bool) -> 'a1 list -> 'a1 list

val find : ('a1 -> bool) -> 'a1 list -> 'a1 option

val combine : 'a1 list -> 'a2 list -> ('a1 * 'a2) list

val firstn : int -> 'a1 list -> 'a1 list

val skipn : int -> 'a1 list -> 'a1 list

val seq : int -> int -> int list

val prod0 : int list -> int

val upd : (int -> 'a1) -> int -> 'a1 -> int -> 'a1

val set_nth : 'a1 list -> int -> 'a1 -> 'a1 list

val nat_list_eqb : int list -> int list -> bool

val memb : int -> int list -> bool

val nodupb : int list -> bool

type ('e, 'a) result =
| Ok of 'a
| Err of 'e

type mesh = int list

val asize : mesh -> int -> int

val wf_meshb : mesh -> bool

val nprod : mesh -> int list -> int

type coords = int -> int

val mr : mesh -> int list -> coords -> int

val set_digits_rev : mesh -> int list -> coords -> int -> coords

val set_digits : mesh -> int list -> coords -> int -> coords

val all_axes : mesh -> int list

val ndevices : mesh -> int

val rank : mesh -> coords -> int

val coords_of_rank : mesh -> int -> coords

type dim = { axes : int list; gsize : int }

type atype = dim list

val lsize : mesh -> dim -> int

val size : mesh -> atype -> int

val used : atype -> int list

val wf_dimb : mesh -> dim -> bool

val wfb : mesh -> atype -> bool

val block : mesh -> dim -> coords -> int

val blocks : mesh -> atype -> coords -> int list

val gidx : mesh -> dim -> coords -> int -> int

val block_starts : mesh -> atype -> int list

type coll =
| AllGather of int * int list
| DynSlice of int * int list
| AllToAll of int * int * int list
| AllPermute of atype

type error =
| BadDim of int
| NoAxes
| NotMinorAxes
| AxisOutOfRange of int
| RepeatedAxis
| AxisInUse of int
| NotDivisible
| SameDim
| BadTarget
| ShapeChanged
| BadMesh
| BadSource
| BadDest
| GlobalShapeMismatch
| WrongResult

val strip_suffix : int list -> int list -> int list option

val same_shape : mesh -> atype -> atype -> bool

val apply : mesh -> atype -> coll -> (error, atype) result

type plan = coll list

val moves : mesh -> atype -> atype -> bool

val recv : mesh -> atype -> coll -> atype -> int

val peak_of : mesh -> atype list -> int

val dim_eq_dec : dim -> dim -> bool

val atype_eqb : atype -> atype -> bool

val run :
  mesh -> atype -> plan -> int -> (int * error, atype list * int list) result

type report = { types : atype list; peak : int; received : int list }

val check : mesh -> atype -> atype -> plan -> (int * error, report) result

val replicated : mesh -> atype -> int list

val gained : mesh -> atype -> atype -> int list

val perm_src : mesh -> atype -> atype -> coords -> coords

val permute_table : mesh -> atype -> atype -> int list

val dflt : dim

val source :
  mesh -> atype -> coll -> atype -> coords -> int list -> coords * int list

val row_major : int list -> int list list

val offset : int list -> int list -> int

val movement : mesh -> atype -> coll -> atype -> int list

val naive : mesh -> atype -> atype -> plan

val synthesize : mesh -> atype -> atype -> bool * plan
