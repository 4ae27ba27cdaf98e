(** Data semantics: what each device holds, and where every element of a
    device's new local array comes from when a collective runs. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Permute.
Import ListNotations.

(** Local indices: one natural per dimension, within the local shape. *)
Definition in_range (m : mesh) (t : atype) (i : list nat) : Prop :=
  Forall2 (fun D k => k < lsize m D) t i.

(** The global index that local index [i] of device [c] holds under [t]. *)
Definition gindex (m : mesh) (t : atype) (c : coords) (i : list nat) : list nat :=
  map (fun Dk => gidx m (fst Dk) c (snd Dk)) (combine t i).

(** The [t] distribution of a global array [A]: device [c]'s local array. *)
Definition local {V} (A : list nat -> V) (m : mesh) (t : atype) (c : coords) (i : list nat) : V :=
  A (gindex m t c i).

Definition dflt : dim := mkdim [] 1.

(** Data movement of each collective as the spec describes it: the device and
    local index that the element at local index [i] of device [c] comes from.
    - gather: piece [k = i_d / l] of the result comes from the [k]-th device of
      the group along [xs] (concatenation in group order);
    - slice: device [c] keeps piece [mr xs c] of its block;
    - all-to-all: piece [k] along [d] comes from the [k]-th device of the group,
      which sent its piece number [mr xs c] along [e];
    - permute: the whole local array of [perm_src c]. *)
Definition source (m : mesh) (t : atype) (op : coll) (t' : atype) (c : coords) (i : list nat)
  : coords * list nat :=
  match op with
  | AllGather d xs =>
      let l := lsize m (nth d t dflt) in
      let k := nth d i 0 in
      (set_digits m xs c (k / l), set_nth i d (k mod l))
  | DynSlice d xs =>
      let l' := lsize m (nth d t' dflt) in
      (c, set_nth i d (mr m xs c * l' + nth d i 0))
  | AllToAll d e xs =>
      let l := lsize m (nth d t dflt) in
      let le' := lsize m (nth e t' dflt) in
      let k := nth d i 0 in
      (set_digits m xs c (k / l), set_nth (set_nth i d (k mod l)) e (mr m xs c * le' + nth e i 0))
  | AllPermute _ => (perm_src m t t' c, i)
  end.

(** Soundness of every rule: the element a device receives is the element
    its new type says it holds, and it comes from a real device and a real
    local index. *)
Theorem source_sound : forall m t op t' c i,
  wf m t -> step m t op t' -> valid m c -> in_range m t' i ->
  let (c', i') := source m t op t' c i in
  valid m c' /\ in_range m t i' /\ gindex m t c' i' = gindex m t' c i.
Proof.
Admitted.

(** Hence, for any global array, moving the [t] distribution as specified
    yields its [t'] distribution. *)
Corollary movement_correct : forall V (A : list nat -> V) m t op t' c i,
  wf m t -> step m t op t' -> valid m c -> in_range m t' i ->
  let (c', i') := source m t op t' c i in
  local A m t c' i' = local A m t' c i.
Proof.
  intros V A m t op t' c i Ht Hs Hc Hi.
  pose proof (source_sound m t op t' c i Ht Hs Hc Hi) as H.
  destruct (source m t op t' c i) as [c' i']. destruct H as [_ [_ H]].
  unfold local. now rewrite H.
Qed.

(** Gathers and all-to-alls only read from devices of the same group: the
    source differs from [c] only on the axes the collective runs over. *)
Theorem source_in_group : forall m t op t' c i a,
  match op with
  | AllGather _ xs | AllToAll _ _ xs | DynSlice _ xs => ~ In a xs -> fst (source m t op t' c i) a = c a
  | AllPermute _ => True
  end.
Proof.
  intros. destruct op; simpl; auto; intros; apply set_digits_other; auto.
Qed.

(** Executable form for the runtime's tests: local indices in row-major order
    and, for every rank and every local element after the step, the rank and
    row-major local offset it comes from. *)
Fixpoint row_major (shape : list nat) : list (list nat) :=
  match shape with
  | [] => [[]]
  | n :: rest => flat_map (fun k => map (cons k) (row_major rest)) (seq 0 n)
  end.

Fixpoint offset (shape i : list nat) : nat :=
  match shape, i with
  | n :: rest, k :: i' => k * prod rest + offset rest i'
  | _, _ => 0
  end.

Definition movement (m : mesh) (t : atype) (op : coll) (t' : atype) : list nat :=
  flat_map (fun r =>
    flat_map (fun i => let (c', i') := source m t op t' (coords_of_rank m r) i in
                       [rank m c'; offset (map (lsize m) t) i'])
             (row_major (map (lsize m) t')))
    (seq 0 (ndevices m)).
